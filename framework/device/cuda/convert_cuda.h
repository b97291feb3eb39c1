// Elementwise dtype conversion on the GPU between F32, F16 and BF16 (round to nearest even).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "framework/core/dtype.h"

namespace mg::cuda {

// dst[i] = src[i] for i < n, converted; dst and src must not overlap unless they are equal
// with the same dtype (then nothing is done).
void convert_cuda(DType dst_dtype, void* dst, DType src_dtype, const void* src, int64_t n,
                  cudaStream_t stream);

}  // namespace mg::cuda
