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

template <typename T>
__global__ void rms_norm_warp_kernel(const T* x, const T* w, T* y, int64_t units, int64_t group,
                                     float eps) {
  pdl_wait();  // x is the kernel's before (launch_pdl, pdl.cuh)
  pdl_launch_dependents();
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
    rms_norm_block_kernel(const T* x, const T* w, T* y, int64_t group, float eps) {
  __shared__ float scratch[32];
  pdl_wait();
  pdl_launch_dependents();
  const int64_t unit = blockIdx.x;
  const T* xs = x + unit * group;
  const float sum_sq = block_sum(rms_norm_sum_sq(xs, group, threadIdx.x, blockDim.x), scratch);
  const float inv_rms = rsqrtf(sum_sq / static_cast<float>(group) + eps);
  rms_norm_store(xs, w, y + unit * group, group, inv_rms, threadIdx.x, blockDim.x);
}

template <typename T>
void launch_rms_norm(const RmsNormArgs& a, cudaStream_t stream) {
  const int64_t units = a.rows * (a.dim / a.group);
  if (units <= 0) return;
  const T* x = static_cast<const T*>(a.x);
  const T* w = static_cast<const T*>(a.weight);
  T* y = static_cast<T*>(a.y);
  if (a.group <= kRmsNormWarpMaxGroup) {
    const int64_t blocks = (units + kRmsNormWarpsPerBlock - 1) / kRmsNormWarpsPerBlock;
    launch_pdl(rms_norm_warp_kernel<T>, dim3(static_cast<unsigned>(blocks)),
               dim3(kRmsNormWarpsPerBlock * 32), 0, stream, x, w, y, units, a.group, a.eps);
  } else {
    launch_pdl(rms_norm_block_kernel<T>, dim3(static_cast<unsigned>(units)),
               dim3(kRmsNormBlockThreads), 0, stream, x, w, y, a.group, a.eps);
  }
}

}  // namespace mg::cuda
