// The fused router GEMV + routing kernel of router_route_cuda.h (included by the per-dtype
// router_route_cuda_<dtype>.cu files). The GEMV part is linear's gemv_block (vector path), the
// routing part moe_routing_cuda.cuh's route_row: the same device code as the two launches they
// replace, so the logits, ids and weights are the same bits.
#pragma once

#include "framework/core/error.h"
#include "framework/device/cuda/cuda_check.h"
#include "framework/device/cuda/pdl.cuh"
#include "ops/moe/cuda/moe_routing_cuda.cuh"
#include "ops/moe/cuda/router_route_cuda.h"
#include "ops/nn/linear/linear_gemv_cuda.cuh"

namespace mg::cuda {

// kMaxRows: the GEMV's accumulators (1, 2, 4, 8) as launch_gemv picks them; kChunks: route_row's
// chunks of a row of E F32 logits (route_chunks<float>). `vector_loads`: the routing may read the
// logits 16 bytes at a time (E a multiple of 4 and logits 16-byte aligned).
template <typename T, int kMaxRows, int kChunks>
__global__ void __launch_bounds__(kGemvThreads)
    router_route_kernel(const T* __restrict__ x, const T* __restrict__ w,
                        const float* __restrict__ router_bias, float* logits, int rows, int64_t in,
                        int warps_per_feature, RouteParams p, const float* __restrict__ score_bias,
                        int32_t* __restrict__ ids, float* __restrict__ weights, unsigned* counter,
                        bool vector_loads) {
  const int64_t E = p.num_experts;
  // gemv_block calls pdl_wait and pdl_launch_dependents after its first weight loads (pdl.cuh):
  // the next kernel (the experts) may get resident early and waits for this grid, the routing
  // included.
  gemv_block<T, float, kMaxRows, true, kGemvLoadsInFlight>(x, w, router_bias, logits, rows, in, E,
                                                           1.0f, warps_per_feature, blockIdx.x);

  // The last block to arrive routes. Each block's fence orders its logits before its arrival is
  // counted; the last block's fence after the count orders its reads after every block's logits
  // (attention_cuda.cuh's split-KV combine does the same).
  __shared__ bool last;
  __threadfence();
  __syncthreads();  // every thread of the block has written its logits and fenced
  if (threadIdx.x == 0) {
    last = atomicAdd(counter, 1u) + 1 == gridDim.x;
    if (last) *counter = 0;  // every block of this launch has arrived: ready for the next launch
  }
  __syncthreads();
  if (!last) return;
  __threadfence();

  // One warp per row, as moe_route_kernel; the logits were written by other blocks of this grid,
  // so route_row reads them through L2 (kCoherent).
  __shared__ uint32_t row_words[kGemvWarps][route_detail::kRouteRowWords<float, kChunks>];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  for (int row = warp; row < rows; row += kGemvWarps) {
    route_detail::route_row<float, kChunks, true>(p, logits + row * E, score_bias,
                                                  ids + row * p.top_k, weights + row * p.top_k,
                                                  row_words[warp], lane, vector_loads);
  }
}

template <typename T, int kMaxRows, int kChunks>
void launch_router_route_rows(const RouterRouteArgs& a, cudaStream_t stream) {
  const int64_t E = a.route.num_experts;
  const int wpf = gemv_warps_per_feature(a.in, E, static_cast<int>(sizeof(T)));
  const int64_t features_per_block = kGemvWarps / wpf;
  const int64_t blocks = (E + features_per_block - 1) / features_per_block;
  const bool vector_loads = E % 4 == 0 && reinterpret_cast<uintptr_t>(a.logits) % 16 == 0;
  launch_pdl(router_route_kernel<T, kMaxRows, kChunks>, dim3(static_cast<unsigned>(blocks)),
             dim3(kGemvThreads), 0, stream, static_cast<const T*>(a.x), static_cast<const T*>(a.w),
             a.router_bias, a.logits, static_cast<int>(a.rows), a.in, wpf, a.route, a.score_bias,
             a.ids, a.weights, a.counter, vector_loads);
}

template <typename T, int kMaxRows>
void launch_router_route_chunks(const RouterRouteArgs& a, cudaStream_t stream) {
  switch (route_chunks<float>(a.route.num_experts)) {
    case 1:
      return launch_router_route_rows<T, kMaxRows, 1>(a, stream);
    case 2:
      return launch_router_route_rows<T, kMaxRows, 2>(a, stream);
    case 4:
      return launch_router_route_rows<T, kMaxRows, 4>(a, stream);
    default:
      return launch_router_route_rows<T, kMaxRows, 8>(a, stream);
  }
}

template <typename T>
void launch_router_route(const RouterRouteArgs& a, cudaStream_t stream) {
  check_route_params(a.route, a.score_bias);
  MG_ASSERT(router_route_fits(a.rows, a.in, static_cast<int>(sizeof(T)), a.x, a.w) &&
                a.logits != nullptr && a.ids != nullptr && a.weights != nullptr &&
                a.counter != nullptr,
            "router_route: {} rows x {} in, x {} w {} counter {}", a.rows, a.in, a.x, a.w,
            static_cast<const void*>(a.counter));
  // The accumulator counts launch_gemv picks, so the logits are its bits.
  if (a.rows == 1) return launch_router_route_chunks<T, 1>(a, stream);
  if (a.rows == 2) return launch_router_route_chunks<T, 2>(a, stream);
  if (a.rows <= 4) return launch_router_route_chunks<T, 4>(a, stream);
  return launch_router_route_chunks<T, 8>(a, stream);
}

}  // namespace mg::cuda
