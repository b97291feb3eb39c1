#include "ops/moe/kernel/prepare_finalize.h"

#include "framework/core/thread_pool.h"
#include "framework/device/stream.h"
#include "ops/moe/kernel/prepare_finalize_all_gather.h"
#include "ops/moe/kernel/prepare_finalize_all_to_all.h"
#include "ops/moe/kernel/prepare_finalize_none.h"
#ifdef MG_WITH_CUDA
#include "framework/device/cuda/cuda_device.h"
#include "framework/device/cuda/dtype_dispatch.h"
#include "ops/moe/cuda/moe_align_cuda.h"
#endif

namespace mg {

PrepareArgs PrepareFinalize::scale_input_by_weight(const PrepareArgs& args, Workspace& ws,
                                                   const MoEExecContext& ctx) const {
  if (!shape_.weight_on_input) return args;
  MG_ASSERT(shape_.top_k == 1, "weight on the input needs top_k 1, got {}", shape_.top_k);
  const int64_t M = args.num_tokens, H = shape_.hidden_size;
  void* x_out = ws.take<std::byte>(M * H * dtype_size(shape_.dtype));
  float* ones = ws.take<float>(M);
  if (ws.is_sizing()) return args;
  PrepareArgs scaled = args;
  scaled.hidden = x_out;
  scaled.topk_weights = ones;
#ifdef MG_WITH_CUDA
  if (ctx.stream != nullptr && ctx.stream->device().is_cuda()) {
    cuda::dispatch_float_dtype(shape_.dtype, [&](auto t) {
      cuda::launch_moe_scale_input<decltype(t)>(args.hidden, args.topk_weights, M, 1, H, x_out,
                                                ones, cuda::native(ctx.stream));
    });
    return scaled;
  }
#endif
  float* x = static_cast<float*>(x_out);
  const float* hidden = static_cast<const float*>(args.hidden);
  auto rows = [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const float w = args.topk_weights[t];
      for (int64_t h = 0; h < H; ++h) x[t * H + h] = w * hidden[t * H + h];
      ones[t] = 1.0f;
    }
  };
  if (ctx.pool) {
    ctx.pool->parallel_for(M, rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(H, 1)));
  } else {
    rows(0, M);
  }
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
