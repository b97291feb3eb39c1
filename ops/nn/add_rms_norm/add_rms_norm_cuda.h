// CUDA add + RMSNorm launcher (see add_rms_norm.h): sum = a + scale * b rounded to T and stored,
// y = sum * rsqrt(mean(sum²) + eps) * w over whole rows, fp32 math.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace mg::cuda {

struct AddRmsNormArgs {
  const void* a = nullptr;       // [rows, dim]
  const void* b = nullptr;       // [rows, dim]
  const void* weight = nullptr;  // [dim] or null
  void* sum = nullptr;           // [rows, dim]; may equal a or b
  void* y = nullptr;             // [rows, dim]; overlaps none of the others
  int64_t rows = 0;
  int64_t dim = 0;
  float scale = 1.0f;
  float eps = 1e-6f;
};

// T: float, __half or __nv_bfloat16 (instantiated in add_rms_norm_cuda_<dtype>.cu).
template <typename T>
void launch_add_rms_norm(const AddRmsNormArgs& args, cudaStream_t stream);

}  // namespace mg::cuda
