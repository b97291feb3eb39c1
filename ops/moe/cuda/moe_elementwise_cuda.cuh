// Bodies of the launchers in moe_elementwise_cuda.h (included by moe_elementwise_cuda_<dtype>.cu).
#pragma once

#include "framework/device/cuda/cuda_check.h"
#include "framework/device/cuda/cuda_utils.cuh"
#include "ops/moe/cuda/moe_activation_cuda.cuh"
#include "ops/moe/cuda/moe_elementwise_cuda.h"

namespace mg::cuda {

template <typename T>
__global__ void moe_accumulate_kernel(T* y, const T* x, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    y[i] = from_float<T>(to_float(y[i]) + to_float(x[i]));
  }
}

template <typename T>
__global__ void moe_scale_rows_sigmoid_kernel(T* y, const T* gate, int64_t rows, int64_t cols) {
  const int64_t n = rows * cols;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    y[i] = from_float<T>(to_float(y[i]) * moe_sigmoid(to_float(gate[i / cols])));
  }
}

template <typename T>
__global__ void moe_activation_kernel(const T* h1, int64_t rows, int64_t inter, MoEActParams act,
                                      T* a) {
  const bool gated = is_gated(act.kind);
  const int64_t n1 = gated ? 2 * inter : inter;
  const int64_t n = rows * inter;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / inter, c = i - r * inter;
    const T* row = h1 + r * n1;
    const float g = to_float(row[c]);
    const float u = gated ? to_float(row[inter + c]) : 0.0f;
    a[i] = from_float<T>(moe_activation(act, g, u));
  }
}

template <typename T>
void launch_moe_accumulate(void* y, const void* x, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  constexpr int kThreads = 256;
  moe_accumulate_kernel<T><<<grid_stride_blocks(n, kThreads), kThreads, 0, stream>>>(
      static_cast<T*>(y), static_cast<const T*>(x), n);
  MG_CUDA_CHECK_LAUNCH();
}

template <typename T>
void launch_moe_scale_rows_sigmoid(void* y, const void* gate, int64_t rows, int64_t cols,
                                   cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return;
  constexpr int kThreads = 256;
  moe_scale_rows_sigmoid_kernel<T>
      <<<grid_stride_blocks(rows * cols, kThreads), kThreads, 0, stream>>>(
          static_cast<T*>(y), static_cast<const T*>(gate), rows, cols);
  MG_CUDA_CHECK_LAUNCH();
}

template <typename T>
void launch_moe_activation(const void* h1, int64_t rows, int64_t inter, const MoEActParams& act,
                           void* a, cudaStream_t stream) {
  if (rows <= 0 || inter <= 0) return;
  constexpr int kThreads = 256;
  moe_activation_kernel<T><<<grid_stride_blocks(rows * inter, kThreads), kThreads, 0, stream>>>(
      static_cast<const T*>(h1), rows, inter, act, static_cast<T*>(a));
  MG_CUDA_CHECK_LAUNCH();
}

}  // namespace mg::cuda
