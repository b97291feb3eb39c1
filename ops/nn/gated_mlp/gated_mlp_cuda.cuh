// CUDA gated activation kernel (included by the per-dtype gated_mlp_cuda_<dtype>.cu files).
#pragma once

#include "framework/device/cuda/cuda_check.h"
#include "framework/device/cuda/cuda_utils.cuh"
#include "ops/nn/activation_cuda.cuh"
#include "ops/nn/gated_mlp/gated_mlp_cuda.h"

namespace mg::cuda {

template <typename T, float (*Act)(float)>
__global__ void gated_act_kernel(T* g, const T* u, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    g[i] = from_float<T>(Act(to_float(g[i])) * to_float(u[i]));
  }
}

template <typename T, float (*Act)(float)>
void launch_gated_act_with(const GatedActArgs& a, cudaStream_t stream) {
  constexpr int kThreads = 256;
  gated_act_kernel<T, Act><<<grid_stride_blocks(a.n, kThreads), kThreads, 0, stream>>>(
      static_cast<T*>(a.g), static_cast<const T*>(a.u), a.n);
  MG_CUDA_CHECK_LAUNCH();
}

template <typename T>
void launch_gated_act(GatedActivation activation, const GatedActArgs& args, cudaStream_t stream) {
  if (args.n <= 0) return;
  switch (activation) {
    case GatedActivation::kSilu:
      return launch_gated_act_with<T, silu>(args, stream);
    case GatedActivation::kGeluErf:
      return launch_gated_act_with<T, gelu_erf>(args, stream);
    case GatedActivation::kGeluTanh:
      return launch_gated_act_with<T, gelu_tanh>(args, stream);
  }
}

}  // namespace mg::cuda
