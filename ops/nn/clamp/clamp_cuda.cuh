// CUDA clamp kernel (included by the per-dtype clamp_cuda_<dtype>.cu files).
//
// Each element is compared in fp32 with the fp32 bounds by the CPU kernel's comparisons, which
// are false for NaN, so NaN passes through as in torch.clamp; then rounded once on store. In BF16
// and F16 a value of x is exact, so only a bound the dtype cannot hold is rounded: the result is
// the CPU kernel's on the same input, rounded through the dtype.
#pragma once

#include "framework/device/cuda/cuda_check.h"
#include "framework/device/cuda/cuda_utils.cuh"
#include "ops/nn/clamp/clamp_cuda.h"

namespace mg::cuda {

template <typename T>
__global__ void clamp_kernel(const T* x, T* out, int64_t n, float lo, float hi) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float v = to_float(x[i]);
    out[i] = from_float<T>(v < lo ? lo : (v > hi ? hi : v));
  }
}

template <typename T>
void launch_clamp(const ClampArgs& args, cudaStream_t stream) {
  if (args.n <= 0) return;
  constexpr int kThreads = 256;
  clamp_kernel<T><<<grid_stride_blocks(args.n, kThreads), kThreads, 0, stream>>>(
      static_cast<const T*>(args.x), static_cast<T*>(args.out), args.n, args.lo, args.hi);
  MG_CUDA_CHECK_LAUNCH();
}

}  // namespace mg::cuda
