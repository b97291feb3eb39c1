// CUDA routing: router logits [rows, E] -> top-k expert ids [rows, k] int32 and weights
// [rows, k] fp32, with exactly the semantics of route_rows (ops/moe/router/routing.h).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "ops/moe/cuda/moe_cuda_types.h"

namespace mg::cuda {

// Grouped top-k keeps one group score per lane of a warp, so it takes at most 32 groups
// (DeepSeek-V2/V3: 8). The oracle checks this next to kMaxRouteExperts / kMaxRouteTopK.
inline constexpr int32_t kMaxRouteGroups = 32;

// logits [rows, E] of T (float, __half, __nv_bfloat16; instantiated in
// moe_routing_cuda_<dtype>.cu), computed in fp32: ids [rows, k] (global expert ids, best first),
// weights [rows, k]. `bias` [E] fp32 (device) iff p.has_score_correction_bias. One launch, one warp
// per row; capturable. Ids equal route_rows' on the same logits; weights agree to a few fp32 ulps
// (the softmax sum is reduced in a different order and expf may differ from the host's exp by an
// ulp).
template <typename T>
void launch_moe_route(const RouteParams& p, const void* logits, int64_t rows, const float* bias,
                      int32_t* ids, float* weights, cudaStream_t stream);

}  // namespace mg::cuda
