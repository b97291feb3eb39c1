// CUDA add launcher: out = a + scale * b elementwise (see add.h), fp32 math.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace mg::cuda {

struct AddArgs {
  const void* a = nullptr;  // [n]
  const void* b = nullptr;  // [n]
  void* out = nullptr;      // [n]; may equal a or b
  int64_t n = 0;
  float scale = 1.0f;
};

// T: float, __half or __nv_bfloat16 (instantiated in add_cuda_<dtype>.cu).
template <typename T>
void launch_add(const AddArgs& args, cudaStream_t stream);

}  // namespace mg::cuda
