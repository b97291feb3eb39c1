#include "ops/moe/kernel/prepare_finalize_all_gather.h"

#include "framework/parallel/communicator.h"

namespace mg {

struct PrepareFinalizeAllGather::State {
  int64_t* rows;          // [dp] tokens of each DP rank
  int64_t* hidden_elems;  // [dp] rows * H
  int64_t* topk_elems;    // [dp] rows * k
  int64_t* logit_elems;   // [dp] rows * E
  int64_t total_rows;
};

PrepareFinalizeAllGather::State* PrepareFinalizeAllGather::gather_counts(
    int64_t num_tokens, Workspace& ws, const MoEExecContext& ctx) const {
  State* s = ws.take<State>(1);
  int64_t* counts = ws.take<int64_t>(4 * dp_size_);
  if (ws.is_sizing()) return nullptr;
  MG_ASSERT(ctx.comm != nullptr && ctx.comm->size() == dp_size_,
            "all_gather prepare/finalize needs the DP group ({} ranks)", dp_size_);
  s->rows = counts;
  s->hidden_elems = counts + dp_size_;
  s->topk_elems = counts + 2 * dp_size_;
  s->logit_elems = counts + 3 * dp_size_;
  ctx.comm->all_gather(&num_tokens, s->rows, 1, DType::kI64, ctx.stream);
  s->total_rows = 0;
  for (int r = 0; r < dp_size_; ++r) {
    s->hidden_elems[r] = s->rows[r] * shape_.hidden_size;
    s->topk_elems[r] = s->rows[r] * shape_.top_k;
    s->logit_elems[r] = s->rows[r] * shape_.num_experts;
    s->total_rows += s->rows[r];
  }
  return s;
}

size_t PrepareFinalizeAllGather::workspace_bytes(int64_t max_tokens, bool monolithic) const {
  Workspace ws = Workspace::sizing();
  const int64_t all = dp_size_ * max_tokens;
  gather_counts(max_tokens, ws, MoEExecContext{});
  PrepareArgs args;
  args.num_tokens = max_tokens;
  if (!monolithic) scale_input_by_weight(args, ws, MoEExecContext{});
  ws.take<float>(all * shape_.hidden_size);
  if (monolithic) {
    ws.take<float>(all * shape_.num_experts);
  } else {
    ws.take<int32_t>(all * shape_.top_k);
    ws.take<float>(all * shape_.top_k);
  }
  ws.take<float>(all * shape_.hidden_size);
  return ws.bytes();
}

DispatchedTokens PrepareFinalizeAllGather::prepare(const PrepareArgs& in, Workspace& ws,
                                                   const MoEExecContext& ctx) {
  State* s = gather_counts(in.num_tokens, ws, ctx);
  const PrepareArgs args = scale_input_by_weight(in, ws, ctx);
  const int64_t all = s->total_rows, H = shape_.hidden_size, k = shape_.top_k;
  float* x = ws.take<float>(all * H);
  int32_t* ids = ws.take<int32_t>(all * k);
  float* weights = ws.take<float>(all * k);
  Communicator& comm = *ctx.comm;
  comm.all_gatherv(args.hidden, x, {s->hidden_elems, static_cast<size_t>(dp_size_)}, DType::kF32,
                   ctx.stream);
  comm.all_gatherv(args.topk_ids, ids, {s->topk_elems, static_cast<size_t>(dp_size_)}, DType::kI32,
                   ctx.stream);
  comm.all_gatherv(args.topk_weights, weights, {s->topk_elems, static_cast<size_t>(dp_size_)},
                   DType::kF32, ctx.stream);
  DispatchedTokens t;
  t.format = ActivationFormat::kStandard;
  t.hidden = x;
  t.num_tokens = all;
  t.topk_ids = ids;
  t.topk_weights = weights;
  t.expert_output = ws.take<float>(all * H);
  t.finalize_state = s;
  return t;
}

void PrepareFinalizeAllGather::reduce_back(const State& s, const void* expert_output, void* out,
                                           const MoEExecContext& ctx) const {
  ctx.comm->reduce_scatterv(expert_output, out, {s.hidden_elems, static_cast<size_t>(dp_size_)},
                            DType::kF32, ReduceOp::kSum, ctx.stream);
}

void PrepareFinalizeAllGather::finalize(const DispatchedTokens& t, void* out,
                                        const MoEExecContext& ctx) {
  reduce_back(*static_cast<const State*>(t.finalize_state), t.expert_output, out, ctx);
}

DispatchedLogits PrepareFinalizeAllGather::prepare_monolithic(const PrepareArgs& args,
                                                              Workspace& ws,
                                                              const MoEExecContext& ctx) {
  State* s = gather_counts(args.num_tokens, ws, ctx);
  const int64_t all = s->total_rows;
  float* x = ws.take<float>(all * shape_.hidden_size);
  float* logits = ws.take<float>(all * shape_.num_experts);
  ctx.comm->all_gatherv(args.hidden, x, {s->hidden_elems, static_cast<size_t>(dp_size_)},
                        DType::kF32, ctx.stream);
  ctx.comm->all_gatherv(args.router_logits, logits, {s->logit_elems, static_cast<size_t>(dp_size_)},
                        DType::kF32, ctx.stream);
  return DispatchedLogits{x, logits, all, ws.take<float>(all * shape_.hidden_size), s};
}

void PrepareFinalizeAllGather::finalize_monolithic(const DispatchedLogits& t, void* out,
                                                   const MoEExecContext& ctx) {
  reduce_back(*static_cast<const State*>(t.finalize_state), t.expert_output, out, ctx);
}

}  // namespace mg
