// The token-movement half of a FusedMoEKernel: prepare() brings this rank's tokens to the
// experts, finalize() brings the expert outputs back and leaves [M, H] on this rank.
//
//   none                single rank, or TP/EP without DP: tokens stay; standard format
//   all_gather          naive DP/EP: all-gather the DP group's tokens (with their ids and
//                       weights, or router logits), reduce-scatter the outputs back; standard
//   all_to_all          send each (token, expert) pair to the rank owning the expert, bucket
//                       by local expert, combine the outputs back and weight them; batched
//
// Llama-4 routing (weight on the input) is applied in prepare(): the token is scaled by its
// top-1 weight and the weight becomes 1, so every experts class handles it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>

#include "ops/moe/kernel/moe_types.h"
#include "ops/moe/kernel/workspace.h"

namespace mg {

struct PrepareArgs {
  const void* hidden = nullptr;  // [M, H], this rank's tokens (ExpertsShape::dtype)
  int64_t num_tokens = 0;        // M (may be 0)
  const int32_t* topk_ids = nullptr;
  const float* topk_weights = nullptr;
  // Router logits [M, E] (monolithic path only).
  const float* router_logits = nullptr;
  // The final output [M, H]; a prepare/finalize that needs no staging lets the experts write
  // here directly.
  void* out = nullptr;
};

class PrepareFinalize {
 public:
  explicit PrepareFinalize(ExpertsShape shape) : shape_(std::move(shape)) {}
  virtual ~PrepareFinalize() = default;

  virtual std::string_view name() const = 0;
  virtual ActivationFormat activation_format() const = 0;
  virtual bool supports_monolithic() const = 0;
  // True when finalize() already summed the contributions of every rank's experts (nothing is
  // left to all-reduce over the TP group).
  virtual bool output_is_reduced() const = 0;
  // The most input rows the experts see when no rank prepares more than `max_tokens` tokens
  // (standard: tokens; batched: tokens per expert slab).
  virtual int64_t max_expert_rows(int64_t max_tokens) const = 0;
  virtual size_t workspace_bytes(int64_t max_tokens, bool monolithic) const = 0;

  // Modular path. Collective: every rank of ctx.comm calls it, with 0 tokens if it has none.
  virtual DispatchedTokens prepare(const PrepareArgs& args, Workspace& ws,
                                   const MoEExecContext& ctx) = 0;
  // Writes out [M, H] (the `out` given to prepare).
  virtual void finalize(const DispatchedTokens& tokens, void* out, const MoEExecContext& ctx) = 0;

  // Whether prepare_monolithic passes PrepareArgs::topk_ids / topk_weights on to the experts
  // (DispatchedLogits): the tokens stay where they are.
  virtual bool forwards_routing() const { return false; }

  // Monolithic path (only where supports_monolithic()).
  virtual DispatchedLogits prepare_monolithic(const PrepareArgs& args, Workspace& ws,
                                              const MoEExecContext& ctx) = 0;
  virtual void finalize_monolithic(const DispatchedLogits& tokens, void* out,
                                   const MoEExecContext& ctx) = 0;

  const ExpertsShape& shape() const { return shape_; }

 protected:
  // With shape().weight_on_input (Llama-4): x'[t] = w[t, 0] x[t] and w' = 1, in `ws` (modular
  // path; a monolithic experts class routes, and so scales, itself). Returns args unchanged
  // otherwise.
  PrepareArgs scale_input_by_weight(const PrepareArgs& args, Workspace& ws,
                                    const MoEExecContext& ctx) const;

  ExpertsShape shape_;
};

// The variant `parallel` calls for (see above) and its activation format, which the oracle
// must match when it picks the experts.
std::string_view prepare_finalize_name(const ParallelConfig& parallel);
ActivationFormat prepare_finalize_format(const ParallelConfig& parallel);
std::unique_ptr<PrepareFinalize> make_prepare_finalize(const ParallelConfig& parallel,
                                                       const ExpertsShape& shape);

}  // namespace mg
