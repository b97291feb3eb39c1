// The MoE router's gate GEMV and the routing as one kernel, for decode-sized calls:
//   logits [rows, E] F32 = x [rows, H] · W_r [E, H]ᵀ (+ b_r)       (the GEMV of linear_gemv_cuda.h)
//   ids, weights [rows, k] = route(logits)                         (route_row of moe_routing_cuda)
//
// Why: at one token the router GEMV (~3.5 us) and the routing kernel (~5 us) are each a few
// microseconds of launch, ramp and drain around almost no bytes (docs/performance.md, issue 15);
// one launch pays that once. How: the GEMV's blocks write their logits, fence, and count their
// arrival on a counter; the block that arrives last fences again, routes every row (one warp per
// row, through the routing kernel's own per-row code, so ids and weights are the two-launch
// path's bits on the same logits) and sets the counter back to zero for the next launch. The
// counter is per session (MoE op state: a graph replay or the next layer finds it zero); the
// logits are still written (the monolithic kernels and tests read them).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "ops/moe/cuda/moe_cuda_types.h"
#include "ops/nn/linear/linear_gemv_cuda.h"

namespace mg::cuda {

// Rows of x the fused kernel takes: the GEMV kernel's own limit. On the router's narrow weight
// the GEMV is no slower than cuBLASLt up to there (`bench gemv`, H100, 2048 x 128, us GEMV /
// cuBLASLt: 1 row 2.15 / 4.79, 4 rows 3.59 / 4.80, 8 rows 5.30 / 5.04; docs/performance.md), and
// fusing saves the routing launch besides. GemmXwt alone takes cuBLASLt from 5 rows of a narrow
// weight (gemv_chosen_rows), so from 5 to 8 rows the fused logits are the GEMV's, not cuBLAS's.
constexpr int64_t kRouterRouteMaxRows = kGemvMaxRows;

struct RouterRouteArgs {
  const void* x = nullptr;             // [rows, in], T; 16-byte aligned
  const void* w = nullptr;             // [E, in], T; 16-byte aligned
  const float* router_bias = nullptr;  // [E] or null
  float* logits = nullptr;             // [rows, E]
  int64_t rows = 0;                    // 1..kRouterRouteMaxRows
  int64_t in = 0;                      // in · sizeof(T) a multiple of 16
  RouteParams route;                   // route.num_experts = E
  const float* score_bias = nullptr;   // [E] iff route.has_score_correction_bias
  int32_t* ids = nullptr;              // [rows, k]
  float* weights = nullptr;            // [rows, k]
  unsigned* counter = nullptr;         // one arrival counter, zero between launches
};

// Whether launch_router_route takes a call of this shape: rows in 1..kRouterRouteMaxRows, rows of
// x and W_r 16-byte multiples and both pointers 16-byte aligned (the GEMV's vector path; GemmXwt
// leaves unaligned rows to cuBLAS, and so does the router).
inline bool router_route_fits(int64_t rows, int64_t in, int element_bytes, const void* x,
                              const void* w) {
  const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  return rows >= 1 && rows <= kRouterRouteMaxRows && in > 0 && (in * element_bytes) % 16 == 0 &&
         aligned(x) && aligned(w);
}

// T: float, __half or __nv_bfloat16 (x and W_r; the logits are F32). Instantiated in
// router_route_cuda_<dtype>.cu. The route parameters must pass launch_moe_route's checks.
template <typename T>
void launch_router_route(const RouterRouteArgs& args, cudaStream_t stream);

}  // namespace mg::cuda
