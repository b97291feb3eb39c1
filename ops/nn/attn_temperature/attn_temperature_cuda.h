// CUDA attn_temperature launcher: out[t] = x[t] * factor(positions[t]) (see attn_temperature.h),
// the factor of each row in fp64 and rounded to fp32 as the CPU kernel does, the product in fp32.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace mg::cuda {

struct AttnTemperatureArgs {
  const void* x = nullptr;             // [tokens, dim]
  void* out = nullptr;                 // [tokens, dim]; may equal x
  const int32_t* positions = nullptr;  // [tokens]; a negative position reads as 0
  int64_t tokens = 0;
  int64_t dim = 0;
  double attn_scale = 0.0;   // the op's fp32 params, widened as the CPU kernel widens them
  double floor_scale = 1.0;  // > 0
};

// T: float, __half or __nv_bfloat16 (instantiated in attn_temperature_cuda_<dtype>.cu).
template <typename T>
void launch_attn_temperature(const AttnTemperatureArgs& args, cudaStream_t stream);

}  // namespace mg::cuda
