// CUDA RMSNorm kernels (included by the per-dtype rms_norm_cuda_<dtype>.cu files).
//
// A "unit" is one group of one row; units are contiguous (unit u starts at u * group). Small
// groups (per-head q/k norms, up to 1024 elements) take one warp per unit, so a block covers
// several heads; larger groups (whole hidden rows) take one block per unit.
#pragma once

#include "framework/device/cuda/cuda_check.h"
#include "framework/device/cuda/cuda_utils.cuh"
#include "framework/device/cuda/pdl.cuh"
#include "ops/nn/rms_norm/rms_norm_cuda.h"

namespace mg::cuda {

constexpr int64_t kRmsNormWarpMaxGroup = 1024;
constexpr int kRmsNormWarpsPerBlock = 8;
constexpr int kRmsNormBlockThreads = 512;

// Σ x[i]² over i = begin, begin + step, ... < group: this thread's share of a unit's sum (then
// warp_sum or block_sum). qk_norm_rope's kernel sums a head with it in the same order.
template <typename T>
__device__ __forceinline__ float rms_norm_sum_sq(const T* xs, int64_t group, int64_t begin,
                                                 int64_t step) {
  float sum_sq = 0.0f;
  for (int64_t i = begin; i < group; i += step) {
    const float v = to_float(xs[i]);
    sum_sq += v * v;
  }
  return sum_sq;
}

template <typename T>
__device__ __forceinline__ void rms_norm_store(const T* xs, const T* w, T* ys, int64_t group,
                                               float inv_rms, int64_t begin, int64_t step) {
  for (int64_t i = begin; i < group; i += step) {
    float v = to_float(xs[i]) * inv_rms;
    if (w != nullptr) v *= to_float(w[i]);
    ys[i] = from_float<T>(v);
  }
}

// block_sum (cuda_utils.cuh) for a block that sums once: the same value bit for bit, without
// the barrier that lets block_sum's scratch be reused by a second call.
__device__ __forceinline__ float rms_norm_block_sum(float v, float* scratch) {
  const int lane = threadIdx.x & 31;
  v = warp_sum(v);
  if (lane == 0) scratch[threadIdx.x >> 5] = v;
  __syncthreads();
  const int warps = static_cast<int>(blockDim.x >> 5);
  return warp_sum(lane < warps ? scratch[lane] : 0.0f);
}

// Elements per thread up to which the block kernels keep a row in registers (kPerThread
// template argument 4, 8 or 16: rows up to 2048, 4096, 8192 at 512 threads); longer rows take
// the loops. Same elements per thread and the same order as the loops, so the same bits; what
// changes is latency: every load of the row is in flight at once (a loop that stores `sum`,
// which may alias its inputs, cannot start the next load first), the norm weight is read
// before pdl_wait (a weight: pdl.cuh rule 1) and the summed values are not read back.
constexpr int kRmsNormMaxPerThread = 16;

// Elements per thread for a block-kernel row of `dim` (0: longer than the register path takes).
inline int rms_norm_regs_per_thread(int64_t dim) {
  const int64_t per = (dim + kRmsNormBlockThreads - 1) / kRmsNormBlockThreads;
  return per <= 4 ? 4 : per <= 8 ? 8 : per <= kRmsNormMaxPerThread ? kRmsNormMaxPerThread : 0;
}

// w[i] for this thread's elements i = threadIdx.x + j * blockDim.x < dim (untouched when w is
// null or past dim).
template <typename T, int kPerThread>
__device__ __forceinline__ void rms_norm_load_weight(const T* w, int64_t dim, T (&wv)[kPerThread]) {
  if (w == nullptr) return;
#pragma unroll
  for (int j = 0; j < kPerThread; ++j) {
    const int64_t i = threadIdx.x + static_cast<int64_t>(j) * blockDim.x;
    if (i < dim) wv[j] = w[i];
  }
}

// rms_norm_store's arithmetic on values held in registers.
template <typename T, int kPerThread>
__device__ __forceinline__ void rms_norm_store_regs(const T (&xv)[kPerThread],
                                                    const T (&wv)[kPerThread], bool has_w, T* ys,
                                                    int64_t dim, float inv_rms) {
#pragma unroll
  for (int j = 0; j < kPerThread; ++j) {
    const int64_t i = threadIdx.x + static_cast<int64_t>(j) * blockDim.x;
    if (i < dim) {
      float v = to_float(xv[j]) * inv_rms;
      if (has_w) v *= to_float(wv[j]);
      ys[i] = from_float<T>(v);
    }
  }
}

template <typename T>
__global__ void rms_norm_warp_kernel(const T* x, const T* w, T* y, int64_t units, int64_t group,
                                     float eps, bool early) {
  pdl_wait_then_launch(early);  // x is the kernel's before (launch_pdl, pdl.cuh)
  const int64_t unit = static_cast<int64_t>(blockIdx.x) * kRmsNormWarpsPerBlock + threadIdx.x / 32;
  if (unit >= units) return;
  const int lane = threadIdx.x & 31;
  const T* xs = x + unit * group;
  const float sum_sq = warp_sum(rms_norm_sum_sq(xs, group, lane, 32));
  const float inv_rms = rsqrtf(sum_sq / static_cast<float>(group) + eps);
  rms_norm_store(xs, w, y + unit * group, group, inv_rms, lane, 32);
}

template <typename T>
__global__ void __launch_bounds__(kRmsNormBlockThreads)
    rms_norm_block_kernel(const T* x, const T* w, T* y, int64_t group, float eps, bool early) {
  __shared__ float scratch[32];
  pdl_wait_then_launch(early);
  const int64_t unit = blockIdx.x;
  const T* xs = x + unit * group;
  const float sum_sq = block_sum(rms_norm_sum_sq(xs, group, threadIdx.x, blockDim.x), scratch);
  const float inv_rms = rsqrtf(sum_sq / static_cast<float>(group) + eps);
  rms_norm_store(xs, w, y + unit * group, group, inv_rms, threadIdx.x, blockDim.x);
}

// rms_norm_block_kernel with the row in registers (kRmsNormMaxPerThread).
template <typename T, int kPerThread>
__global__ void __launch_bounds__(kRmsNormBlockThreads)
    rms_norm_block_regs_kernel(const T* x, const T* w, T* y, int64_t group, float eps, bool early) {
  __shared__ float scratch[32];
  T wv[kPerThread];
  rms_norm_load_weight<T, kPerThread>(w, group, wv);
  pdl_wait_then_launch(early);
  const T* xs = x + static_cast<int64_t>(blockIdx.x) * group;
  T xv[kPerThread];
#pragma unroll
  for (int j = 0; j < kPerThread; ++j) {
    const int64_t i = threadIdx.x + static_cast<int64_t>(j) * blockDim.x;
    if (i < group) xv[j] = xs[i];
  }
  float sum_sq = 0.0f;
#pragma unroll
  for (int j = 0; j < kPerThread; ++j) {
    const int64_t i = threadIdx.x + static_cast<int64_t>(j) * blockDim.x;
    if (i < group) {
      const float v = to_float(xv[j]);
      sum_sq += v * v;
    }
  }
  sum_sq = rms_norm_block_sum(sum_sq, scratch);
  const float inv_rms = rsqrtf(sum_sq / static_cast<float>(group) + eps);
  rms_norm_store_regs<T, kPerThread>(xv, wv, w != nullptr,
                                     y + static_cast<int64_t>(blockIdx.x) * group, group, inv_rms);
}

template <typename T>
void launch_rms_norm(const RmsNormArgs& a, cudaStream_t stream) {
  const int64_t units = a.rows * (a.dim / a.group);
  if (units <= 0) return;
  const T* x = static_cast<const T*>(a.x);
  const T* w = static_cast<const T*>(a.weight);
  T* y = static_cast<T*>(a.y);
  // Its readers are GEMVs or rope / attention kernels: pdl_wait_then_launch.
  const bool early = pdl_early_dependents();
  if (a.group <= kRmsNormWarpMaxGroup) {
    const int64_t blocks = (units + kRmsNormWarpsPerBlock - 1) / kRmsNormWarpsPerBlock;
    launch_pdl(rms_norm_warp_kernel<T>, dim3(static_cast<unsigned>(blocks)),
               dim3(kRmsNormWarpsPerBlock * 32), 0, stream, x, w, y, units, a.group, a.eps, early);
  } else {
    const dim3 grid(static_cast<unsigned>(units)), block(kRmsNormBlockThreads);
    switch (rms_norm_regs_per_thread(a.group)) {
      case 4:
        return launch_pdl(rms_norm_block_regs_kernel<T, 4>, grid, block, 0, stream, x, w, y,
                          a.group, a.eps, early);
      case 8:
        return launch_pdl(rms_norm_block_regs_kernel<T, 8>, grid, block, 0, stream, x, w, y,
                          a.group, a.eps, early);
      case kRmsNormMaxPerThread:
        return launch_pdl(rms_norm_block_regs_kernel<T, kRmsNormMaxPerThread>, grid, block, 0,
                          stream, x, w, y, a.group, a.eps, early);
      default:
        return launch_pdl(rms_norm_block_kernel<T>, grid, block, 0, stream, x, w, y, a.group, a.eps,
                          early);
    }
  }
}

}  // namespace mg::cuda
