// CUDA add + RMSNorm kernels (included by the per-dtype add_rms_norm_cuda_<dtype>.cu files).
//
// The same work split and reduction order as rms_norm's kernels (rms_norm_cuda.cuh) with the
// add's arithmetic (add_cuda.cuh) in the first loop: rows up to kRmsNormWarpMaxGroup take one warp
// each, longer rows one block of kRmsNormBlockThreads; so the fused graph's outputs equal the
// unfused graph's bit for bit on the GPU.
#pragma once

#include "framework/device/cuda/cuda_check.h"
#include "framework/device/cuda/cuda_utils.cuh"
#include "framework/device/cuda/pdl.cuh"
#include "ops/nn/add_rms_norm/add_rms_norm_cuda.h"
#include "ops/nn/rms_norm/rms_norm_cuda.cuh"

namespace mg::cuda {

// sum[i] = round(a[i] + scale * b[i]) for i = begin, begin + step, ... < dim; returns Σ sum[i]²
// of this thread's elements, from the rounded values (what rms_norm would read back).
template <typename T>
__device__ __forceinline__ float add_row_part(const T* a, const T* b, T* sum, int64_t dim,
                                              float scale, int64_t begin, int64_t step) {
  float sum_sq = 0.0f;
  for (int64_t i = begin; i < dim; i += step) {
    const T s = from_float<T>(to_float(a[i]) + scale * to_float(b[i]));
    sum[i] = s;
    const float v = to_float(s);
    sum_sq += v * v;
  }
  return sum_sq;
}

template <typename T>
__global__ void add_rms_norm_warp_kernel(const T* a, const T* b, const T* w, T* sum, T* y,
                                         int64_t rows, int64_t dim, float scale, float eps,
                                         bool early) {
  pdl_wait_then_launch(early);  // a and b are the kernels' before (launch_pdl, pdl.cuh)
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRmsNormWarpsPerBlock + threadIdx.x / 32;
  if (row >= rows) return;
  const int lane = threadIdx.x & 31;
  const int64_t off = row * dim;
  float sum_sq = add_row_part(a + off, b + off, sum + off, dim, scale, lane, 32);
  sum_sq = warp_sum(sum_sq);
  const float inv_rms = rsqrtf(sum_sq / static_cast<float>(dim) + eps);
  // Each lane reads back only the elements it wrote: no synchronisation needed.
  rms_norm_store(sum + off, w, y + off, dim, inv_rms, lane, 32);
}

template <typename T>
__global__ void __launch_bounds__(kRmsNormBlockThreads)
    add_rms_norm_block_kernel(const T* a, const T* b, const T* w, T* sum, T* y, int64_t dim,
                              float scale, float eps, bool early) {
  __shared__ float scratch[32];
  pdl_wait_then_launch(early);
  const int64_t off = static_cast<int64_t>(blockIdx.x) * dim;
  float sum_sq = add_row_part(a + off, b + off, sum + off, dim, scale, threadIdx.x, blockDim.x);
  sum_sq = block_sum(sum_sq, scratch);
  const float inv_rms = rsqrtf(sum_sq / static_cast<float>(dim) + eps);
  rms_norm_store(sum + off, w, y + off, dim, inv_rms, threadIdx.x, blockDim.x);
}

// add_rms_norm_block_kernel with the row in registers (kRmsNormMaxPerThread, rms_norm_cuda.cuh):
// the same elements per thread in the same order, so the same bits.
template <typename T, int kPerThread>
__global__ void __launch_bounds__(kRmsNormBlockThreads)
    add_rms_norm_block_regs_kernel(const T* a, const T* b, const T* w, T* sum, T* y, int64_t dim,
                                   float scale, float eps, bool early) {
  __shared__ float scratch[32];
  T wv[kPerThread];
  rms_norm_load_weight<T, kPerThread>(w, dim, wv);  // a weight: before pdl_wait
  pdl_wait_then_launch(early);
  const int64_t off = static_cast<int64_t>(blockIdx.x) * dim;
  // Every load before the first store: `sum` may alias a or b, but each thread reads and writes
  // only its own elements.
  T av[kPerThread], bv[kPerThread];
#pragma unroll
  for (int j = 0; j < kPerThread; ++j) {
    const int64_t i = threadIdx.x + static_cast<int64_t>(j) * blockDim.x;
    if (i < dim) {
      av[j] = a[off + i];
      bv[j] = b[off + i];
    }
  }
  T sv[kPerThread];
  float sum_sq = 0.0f;
#pragma unroll
  for (int j = 0; j < kPerThread; ++j) {
    const int64_t i = threadIdx.x + static_cast<int64_t>(j) * blockDim.x;
    if (i < dim) {
      sv[j] = from_float<T>(to_float(av[j]) + scale * to_float(bv[j]));  // add_row_part's
      sum[off + i] = sv[j];
      const float v = to_float(sv[j]);
      sum_sq += v * v;
    }
  }
  sum_sq = rms_norm_block_sum(sum_sq, scratch);
  const float inv_rms = rsqrtf(sum_sq / static_cast<float>(dim) + eps);
  rms_norm_store_regs<T, kPerThread>(sv, wv, w != nullptr, y + off, dim, inv_rms);
}

template <typename T>
void launch_add_rms_norm(const AddRmsNormArgs& p, cudaStream_t stream) {
  if (p.rows <= 0 || p.dim <= 0) return;
  const T* a = static_cast<const T*>(p.a);
  const T* b = static_cast<const T*>(p.b);
  const T* w = static_cast<const T*>(p.weight);
  T* sum = static_cast<T*>(p.sum);
  T* y = static_cast<T*>(p.y);
  // Its readers are GEMVs (q/k/v, the router, the LM head): pdl_wait_then_launch.
  const bool early = pdl_early_dependents();
  if (p.dim <= kRmsNormWarpMaxGroup) {
    const int64_t blocks = (p.rows + kRmsNormWarpsPerBlock - 1) / kRmsNormWarpsPerBlock;
    launch_pdl(add_rms_norm_warp_kernel<T>, dim3(static_cast<unsigned>(blocks)),
               dim3(kRmsNormWarpsPerBlock * 32), 0, stream, a, b, w, sum, y, p.rows, p.dim, p.scale,
               p.eps, early);
  } else {
    const dim3 grid(static_cast<unsigned>(p.rows)), block(kRmsNormBlockThreads);
    switch (rms_norm_regs_per_thread(p.dim)) {
      case 4:
        return launch_pdl(add_rms_norm_block_regs_kernel<T, 4>, grid, block, 0, stream, a, b, w,
                          sum, y, p.dim, p.scale, p.eps, early);
      case 8:
        return launch_pdl(add_rms_norm_block_regs_kernel<T, 8>, grid, block, 0, stream, a, b, w,
                          sum, y, p.dim, p.scale, p.eps, early);
      case kRmsNormMaxPerThread:
        return launch_pdl(add_rms_norm_block_regs_kernel<T, kRmsNormMaxPerThread>, grid, block, 0,
                          stream, a, b, w, sum, y, p.dim, p.scale, p.eps, early);
      default:
        return launch_pdl(add_rms_norm_block_kernel<T>, grid, block, 0, stream, a, b, w, sum, y,
                          p.dim, p.scale, p.eps, early);
    }
  }
}

}  // namespace mg::cuda
