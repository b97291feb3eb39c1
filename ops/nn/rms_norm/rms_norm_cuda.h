// CUDA RMSNorm launcher: y = x * rsqrt(mean over each group of x² + eps) * w (see rms_norm.h),
// fp32 math on F32, F16 or BF16 data.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace mg::cuda {

struct RmsNormArgs {
  const void* x = nullptr;       // [rows, dim]
  const void* weight = nullptr;  // [group] or null (no weight)
  void* y = nullptr;             // [rows, dim]; must not overlap x unless equal to it
  int64_t rows = 0;
  int64_t dim = 0;
  int64_t group = 0;  // dim % group == 0; groups are normalised independently
  float eps = 1e-6f;
};

// T: float, __half or __nv_bfloat16 (instantiated in rms_norm_cuda_<dtype>.cu).
template <typename T>
void launch_rms_norm(const RmsNormArgs& args, cudaStream_t stream);

}  // namespace mg::cuda
