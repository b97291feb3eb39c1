// Integer weight-only codes (W4A16 / W8A16) on the CPU: the GEMM that reads canonical codes
// (framework/core/int_quant.h) and dequantizes one tile of 128 weight rows at a time into F32
// (never the whole matrix). Used by the weight-only linear and the cpu_wna16 MoE experts.
#pragma once

#include <cstdint>

#include "framework/core/quant.h"

namespace mg {

class ThreadPool;

// y [n, R] = x [n, C] . W^T for matrix `m` (index over the leading dimensions) of canonical
// integer `codes` with `q` (q.logical_shape [..., R, C]). Host fp32 x and y (y must not alias x).
// Parallel over weight tiles on `pool` (null: the calling thread; never from inside a
// parallel_for of `pool`). Scratch is per thread.
void cpu_int_gemm_xwt(const float* x, int64_t n, const Tensor& codes, const WeightQuantization& q,
                      int64_t m, float* y, ThreadPool* pool);

}  // namespace mg
