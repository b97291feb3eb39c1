// CUDA clamp launcher: out = min(max(x, lo), hi) elementwise (see clamp.h), compared in fp32.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <limits>

namespace mg::cuda {

struct ClampArgs {
  const void* x = nullptr;  // [n]
  void* out = nullptr;      // [n]; may equal x
  int64_t n = 0;
  // An unset bound of the op is infinite, which leaves every value (and NaN) as it is.
  float lo = -std::numeric_limits<float>::infinity();
  float hi = std::numeric_limits<float>::infinity();
};

// T: float, __half or __nv_bfloat16 (instantiated in clamp_cuda_<dtype>.cu).
template <typename T>
void launch_clamp(const ClampArgs& args, cudaStream_t stream);

}  // namespace mg::cuda
