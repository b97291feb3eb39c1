#include "ops/moe/kernel/fused_moe_kernel.h"

#include "framework/core/error.h"

namespace mg {

FusedMoEKernel::FusedMoEKernel(std::unique_ptr<PrepareFinalize> prepare_finalize,
                               std::unique_ptr<Experts> experts)
    : prepare_finalize_(std::move(prepare_finalize)), experts_(std::move(experts)) {
  MG_ASSERT(prepare_finalize_ && experts_, "FusedMoEKernel needs both parts");
  const PrepareFinalize& pf = *prepare_finalize_;
  const Experts& ex = *experts_;
  MG_CHECK(!ex.is_monolithic() || pf.supports_monolithic(),
           "MoE kernel: experts '{}' are monolithic (router logits in), but prepare/finalize "
           "'{}' only moves routed tokens (modular)",
           ex.name(), pf.name());
  MG_CHECK(ex.activation_format() == pf.activation_format(),
           "MoE kernel: experts '{}' take the {} activation format, but prepare/finalize '{}' "
           "produces the {} format",
           ex.name(), activation_format_name(ex.activation_format()), pf.name(),
           activation_format_name(pf.activation_format()));
}

std::string FusedMoEKernel::str() const {
  return fmt::format("{} + {}", experts_->name(), prepare_finalize_->name());
}

size_t FusedMoEKernel::workspace_bytes(int64_t max_tokens) const {
  const PrepareFinalize& pf = *prepare_finalize_;
  return pf.workspace_bytes(max_tokens, is_monolithic()) +
         experts_->workspace_bytes(pf.max_expert_rows(max_tokens));
}

void FusedMoEKernel::apply(const PrepareArgs& args, Workspace& ws, const MoEExecContext& ctx) {
  MG_ASSERT(!is_monolithic(), "apply() on monolithic experts {}", experts_->name());
  const DispatchedTokens tokens = prepare_finalize_->prepare(args, ws, ctx);
  static_cast<ExpertsModular&>(*experts_).apply(tokens, ws, ctx);
  prepare_finalize_->finalize(tokens, args.out, ctx);
}

bool FusedMoEKernel::monolithic_takes_routing() const {
  return is_monolithic() && prepare_finalize_->forwards_routing() &&
         static_cast<const ExpertsMonolithic&>(*experts_).takes_routing();
}

void FusedMoEKernel::apply_monolithic(const PrepareArgs& args, Workspace& ws,
                                      const MoEExecContext& ctx) {
  MG_ASSERT(is_monolithic(), "apply_monolithic() on modular experts {}", experts_->name());
  const DispatchedLogits tokens = prepare_finalize_->prepare_monolithic(args, ws, ctx);
  static_cast<ExpertsMonolithic&>(*experts_).apply(tokens, ws, ctx);
  prepare_finalize_->finalize_monolithic(tokens, args.out, ctx);
}

}  // namespace mg
