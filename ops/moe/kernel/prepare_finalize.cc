#include "ops/moe/kernel/prepare_finalize.h"

#include "framework/core/thread_pool.h"
#include "ops/moe/kernel/prepare_finalize_all_gather.h"
#include "ops/moe/kernel/prepare_finalize_all_to_all.h"
#include "ops/moe/kernel/prepare_finalize_none.h"

namespace mg {

PrepareArgs PrepareFinalize::scale_input_by_weight(const PrepareArgs& args, Workspace& ws,
                                                   const MoEExecContext& ctx) const {
  if (!shape_.weight_on_input) return args;
  MG_ASSERT(shape_.top_k == 1, "weight on the input needs top_k 1, got {}", shape_.top_k);
  const int64_t M = args.num_tokens, H = shape_.hidden_size;
  float* x = ws.take<float>(M * H);
  float* ones = ws.take<float>(M);
  if (ws.is_sizing()) return args;
  auto rows = [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const float w = args.topk_weights[t];
      for (int64_t h = 0; h < H; ++h) x[t * H + h] = w * args.hidden[t * H + h];
      ones[t] = 1.0f;
    }
  };
  if (ctx.pool) {
    ctx.pool->parallel_for(M, rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(H, 1)));
  } else {
    rows(0, M);
  }
  PrepareArgs scaled = args;
  scaled.hidden = x;
  scaled.topk_weights = ones;
  return scaled;
}

std::string_view prepare_finalize_name(const ParallelConfig& parallel) {
  if (parallel.dispatch() == MoEDispatch::kAllToAll) return "all_to_all";
  if (parallel.dp_size() > 1) return "all_gather";
  return "none";
}

ActivationFormat prepare_finalize_format(const ParallelConfig& parallel) {
  return parallel.dispatch() == MoEDispatch::kAllToAll ? ActivationFormat::kBatched
                                                       : ActivationFormat::kStandard;
}

std::unique_ptr<PrepareFinalize> make_prepare_finalize(const ParallelConfig& parallel,
                                                       const ExpertsShape& shape) {
  if (parallel.dispatch() == MoEDispatch::kAllToAll) {
    return std::make_unique<PrepareFinalizeAllToAll>(shape, parallel.ep_size());
  }
  if (parallel.dp_size() > 1) {
    // The reduce-scatter sums the DP group; the TP ranks' shards remain when tp > 1.
    return std::make_unique<PrepareFinalizeAllGather>(shape, parallel.dp_size(),
                                                      parallel.tp_size() == 1);
  }
  return std::make_unique<PrepareFinalizeNone>(shape, !parallel.is_single_rank());
}

}  // namespace mg
