// CUDA attn_temperature kernel (included by the per-dtype attn_temperature_cuda_<dtype>.cu
// files).
//
// One block per token. Every thread evaluates its row's factor itself (a few fp64 operations: no
// shared memory, no barrier) with the operations of attn_temperature_factor() in the same order;
// __dmul_rn keeps nvcc from fusing the multiply and the add into an fma that the default host
// build does not do. Rounded to fp32 it is the CPU kernel's factor: libdevice's and the host
// libm's fp64 log1p are each within an ulp of exact (as is an fma the host compiler may form
// under MG_CPU_ARCH), so the two could round apart only for a value within an fp64 ulp of an fp32
// rounding boundary. Then x * factor in fp32, rounded once on store.
//
// The positions are read on the device, so the kernel cannot report a negative one without a
// host sync (the CPU kernel throws): the Session checks every position against [0, max_seq_len)
// on the host before a forward, and a negative position that reaches the kernel anyway reads as
// 0.
#pragma once

#include "framework/device/cuda/cuda_check.h"
#include "framework/device/cuda/cuda_utils.cuh"
#include "ops/nn/attn_temperature/attn_temperature_cuda.h"

namespace mg::cuda {

// attn_temperature_factor() on the device, rounded to fp32.
__device__ __forceinline__ float attn_temperature_factor_f32(int32_t position, double attn_scale,
                                                             double floor_scale) {
  const double p = position < 0 ? 0.0 : static_cast<double>(position);
  return static_cast<float>(__dmul_rn(log1p(floor((p + 1.0) / floor_scale)), attn_scale) + 1.0);
}

template <typename T>
__global__ void attn_temperature_kernel(const T* x, T* out, const int32_t* positions, int64_t dim,
                                        double attn_scale, double floor_scale) {
  const int64_t t = blockIdx.x;
  const float factor = attn_temperature_factor_f32(positions[t], attn_scale, floor_scale);
  const T* xr = x + t * dim;
  T* outr = out + t * dim;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
    outr[i] = from_float<T>(to_float(xr[i]) * factor);
  }
}

template <typename T>
void launch_attn_temperature(const AttnTemperatureArgs& args, cudaStream_t stream) {
  if (args.tokens <= 0) return;
  const int threads = args.dim >= 256 ? 256 : 32 * static_cast<int>((args.dim + 31) / 32);
  attn_temperature_kernel<T><<<static_cast<unsigned>(args.tokens), threads, 0, stream>>>(
      static_cast<const T*>(args.x), static_cast<T*>(args.out), args.positions, args.dim,
      args.attn_scale, args.floor_scale);
  MG_CUDA_CHECK_LAUNCH();
}

}  // namespace mg::cuda
