// Prepare/finalize "all_gather": naive data parallelism (vLLM's AllGather + ReduceScatter).
//
//   prepare   counts [dp] = all_gather(M); x_all [sum M, H], ids/weights [sum M, k] (or router
//             logits [sum M, E] on the monolithic path) = all_gatherv over the DP group
//   experts   run on every DP rank's tokens (this rank's experts or shard only)
//   finalize  out [M, H] = reduce_scatterv(expert output [sum M, H]) over the DP group: the sum
//             over the DP group's ranks, i.e. over their experts; with tp > 1 the TP ranks'
//             shards are still to be summed (output_is_reduced() is false)
#pragma once

#include "ops/moe/kernel/prepare_finalize.h"

namespace mg {

class PrepareFinalizeAllGather final : public PrepareFinalize {
 public:
  PrepareFinalizeAllGather(ExpertsShape shape, int dp_size, bool output_reduced)
      : PrepareFinalize(std::move(shape)), dp_size_(dp_size), output_reduced_(output_reduced) {}

  std::string_view name() const override { return "all_gather"; }
  ActivationFormat activation_format() const override { return ActivationFormat::kStandard; }
  bool supports_monolithic() const override { return true; }
  bool output_is_reduced() const override { return output_reduced_; }
  int64_t max_expert_rows(int64_t max_tokens) const override { return dp_size_ * max_tokens; }
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
  // Exchanges the token counts; returns the state (in `ws`) with rows and element counts.
  State* gather_counts(int64_t num_tokens, Workspace& ws, const MoEExecContext& ctx) const;
  void reduce_back(const State& state, const void* expert_output, void* out,
                   const MoEExecContext& ctx) const;

  int dp_size_;
  bool output_reduced_;
};

}  // namespace mg
