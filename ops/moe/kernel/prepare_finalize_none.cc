#include "ops/moe/kernel/prepare_finalize_none.h"

namespace mg {

size_t PrepareFinalizeNone::workspace_bytes(int64_t max_tokens, bool monolithic) const {
  Workspace ws = Workspace::sizing();
  PrepareArgs args;
  args.num_tokens = max_tokens;
  if (!monolithic) scale_input_by_weight(args, ws, MoEExecContext{});
  return ws.bytes();
}

DispatchedTokens PrepareFinalizeNone::prepare(const PrepareArgs& in, Workspace& ws,
                                              const MoEExecContext& ctx) {
  const PrepareArgs args = scale_input_by_weight(in, ws, ctx);
  DispatchedTokens t;
  t.format = ActivationFormat::kStandard;
  t.hidden = args.hidden;
  t.num_tokens = args.num_tokens;
  t.topk_ids = args.topk_ids;
  t.topk_weights = args.topk_weights;
  t.expert_output = args.out;
  return t;
}

DispatchedLogits PrepareFinalizeNone::prepare_monolithic(const PrepareArgs& args, Workspace& ws,
                                                         const MoEExecContext& ctx) {
  return DispatchedLogits{args.hidden, args.router_logits, args.num_tokens,  args.out,
                          nullptr,     args.topk_ids,      args.topk_weights};
}

}  // namespace mg
