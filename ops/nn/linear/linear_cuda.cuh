// CUDA bias kernel of linear (included by the per-dtype linear_cuda_<dtype>.cu files).
#pragma once

#include "framework/device/cuda/cuda_check.h"
#include "framework/device/cuda/cuda_utils.cuh"
#include "ops/nn/linear/linear_cuda.h"

namespace mg::cuda {

template <typename T>
__global__ void add_bias_kernel(T* y, const T* bias, int64_t rows, int64_t cols) {
  const int64_t n = rows * cols;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    y[i] = from_float<T>(to_float(y[i]) + to_float(bias[i % cols]));
  }
}

template <typename T>
void launch_add_bias(void* y, const void* bias, int64_t rows, int64_t cols, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return;
  constexpr int kThreads = 256;
  add_bias_kernel<T><<<grid_stride_blocks(rows * cols, kThreads), kThreads, 0, stream>>>(
      static_cast<T*>(y), static_cast<const T*>(bias), rows, cols);
  MG_CUDA_CHECK_LAUNCH();
}

}  // namespace mg::cuda
