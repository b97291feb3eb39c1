// CUDA add kernel (included by the per-dtype add_cuda_<dtype>.cu files).
#pragma once

#include "framework/device/cuda/cuda_check.h"
#include "framework/device/cuda/cuda_utils.cuh"
#include "ops/nn/add/add_cuda.h"

namespace mg::cuda {

template <typename T>
__global__ void add_kernel(const T* a, const T* b, T* out, int64_t n, float scale) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    out[i] = from_float<T>(to_float(a[i]) + scale * to_float(b[i]));
  }
}

template <typename T>
void launch_add(const AddArgs& args, cudaStream_t stream) {
  if (args.n <= 0) return;
  constexpr int kThreads = 256;
  add_kernel<T><<<grid_stride_blocks(args.n, kThreads), kThreads, 0, stream>>>(
      static_cast<const T*>(args.a), static_cast<const T*>(args.b), static_cast<T*>(args.out),
      args.n, args.scale);
  MG_CUDA_CHECK_LAUNCH();
}

}  // namespace mg::cuda
