// The CPU GEMM of the MoE code: y [rows, out] = x [rows, in] . w [out, in]^T, fp32, row-major.
//
// A private stand-in with the signature of ops/nn/linear/linear_gemm.h's cpu_gemm_xwt, used
// until that one lands in the tree; then the call sites switch to it and this file goes.
#pragma once

#include <cstdint>

namespace mg {

class ThreadPool;

// `pool` may be null (runs on the calling thread); must not be called from inside a
// parallel_for of `pool`. y must not alias x or w.
void moe_gemm_xwt(const float* x, int64_t rows, int64_t in, const float* w, int64_t out, float* y,
                  ThreadPool* pool);

}  // namespace mg
