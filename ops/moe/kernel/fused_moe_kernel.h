// FusedMoEKernel = PrepareFinalize + Experts: the routed half of an MoE layer on one rank.
//
//   modular     apply(x, ids, weights):  prepare -> experts.apply -> finalize
//   monolithic  apply_monolithic(x, logits): prepare_monolithic -> experts.apply ->
//               finalize_monolithic
//
// The pair is checked when it is made: a modular experts class needs the modular path, a
// monolithic one a prepare/finalize that supports it, and both must use the same activation
// format (standard or batched).
#pragma once

#include <memory>
#include <string>

#include "ops/moe/kernel/experts.h"
#include "ops/moe/kernel/prepare_finalize.h"

namespace mg {

class FusedMoEKernel {
 public:
  // Throws mg::Error naming both parts when they do not fit together.
  FusedMoEKernel(std::unique_ptr<PrepareFinalize> prepare_finalize,
                 std::unique_ptr<Experts> experts);

  bool is_monolithic() const { return experts_->is_monolithic(); }
  // Monolithic experts that use ids and weights the runner routed (PrepareArgs::topk_ids), when
  // the prepare/finalize forwards them.
  bool monolithic_takes_routing() const;
  bool output_is_reduced() const { return prepare_finalize_->output_is_reduced(); }
  const PrepareFinalize& prepare_finalize() const { return *prepare_finalize_; }
  const Experts& experts() const { return *experts_; }
  // "cpu_eigen + none".
  std::string str() const;

  // Scratch for a call with at most `max_tokens` tokens on any rank.
  size_t workspace_bytes(int64_t max_tokens) const;

  // args.out [M, H] = the routed experts' output for this rank's tokens, from
  // args.topk_ids / topk_weights. Modular experts only. Collective over ctx.comm.
  void apply(const PrepareArgs& args, Workspace& ws, const MoEExecContext& ctx);
  // The same from args.router_logits. Monolithic experts only.
  void apply_monolithic(const PrepareArgs& args, Workspace& ws, const MoEExecContext& ctx);

 private:
  std::unique_ptr<PrepareFinalize> prepare_finalize_;
  std::unique_ptr<Experts> experts_;
};

}  // namespace mg
