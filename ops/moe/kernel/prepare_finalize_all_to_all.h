// Prepare/finalize "all_to_all": expert-parallel dispatch and combine (DeepEP style), batched.
//
//   prepare   each (token, expert) pair of this rank goes to the EP rank owning the expert:
//             send_x [M k, H] grouped by destination, send_meta [M k] = local expert there;
//             counts exchanged with all_to_all, rows with all_to_allv; the received rows are
//             bucketed into slabs [E_local, T, H] (T = ep x max tokens per rank, the most one
//             expert can receive) in arrival order: source rank, then token, then k
//   experts   unweighted outputs per slab row (batched format)
//   finalize  the output rows go back with the inverse all_to_allv; out[t] = sum_j w[t, j]
//             row(t, j), j in order; the output is complete (every expert of every rank has
//             been summed), so output_is_reduced() is true
// Needs EP over all ranks with tp_size 1 (ParallelConfig checks it). A null communicator is a
// group of one rank.
#pragma once

#include "ops/moe/kernel/prepare_finalize.h"

namespace mg {

class PrepareFinalizeAllToAll final : public PrepareFinalize {
 public:
  PrepareFinalizeAllToAll(ExpertsShape shape, int ep_size)
      : PrepareFinalize(std::move(shape)), ep_size_(ep_size) {}

  std::string_view name() const override { return "all_to_all"; }
  ActivationFormat activation_format() const override { return ActivationFormat::kBatched; }
  bool supports_monolithic() const override { return false; }
  bool output_is_reduced() const override { return true; }
  int64_t max_expert_rows(int64_t max_tokens) const override { return ep_size_ * max_tokens; }
  size_t workspace_bytes(int64_t max_tokens, bool monolithic) const override;

  DispatchedTokens prepare(const PrepareArgs& args, Workspace& ws,
                           const MoEExecContext& ctx) override;
  void finalize(const DispatchedTokens& tokens, void* out, const MoEExecContext& ctx) override;
  DispatchedLogits prepare_monolithic(const PrepareArgs& args, Workspace& ws,
                                      const MoEExecContext& ctx) override;
  void finalize_monolithic(const DispatchedLogits& tokens, void* out,
                           const MoEExecContext& ctx) override;

 private:
  struct State;
  struct Buffers;

  int ep_size_;
};

}  // namespace mg
