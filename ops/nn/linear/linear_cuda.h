// CUDA helper kernel of linear: the bias pass of the GEMM fallback path (linear_gemm_cuda.h);
// the main path adds the bias in cuBLASLt's epilogue.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace mg::cuda {

// y [rows, cols] += bias [cols]. T: float, __half or __nv_bfloat16 (linear_cuda_<dtype>.cu).
template <typename T>
void launch_add_bias(void* y, const void* bias, int64_t rows, int64_t cols, cudaStream_t stream);

}  // namespace mg::cuda
