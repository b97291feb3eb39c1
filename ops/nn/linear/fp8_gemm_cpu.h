// FP8 E4M3 weights on the CPU: the GEMM that reads codes and dequantizes one tile of 128 weight
// rows at a time into F32 (never the whole matrix), and the dynamic activation quantization
// applied as codes x scales. Used by the FP8 linear and the cpu_fp8 MoE experts.
#pragma once

#include <cstdint>

#include "framework/core/quant.h"

namespace mg {

class ThreadPool;

// y [n, R] = x [n, C] . W^T with W[r, c] = e4m3(codes[r * C + c]) * scale[(r / gr) * sc + c / gc]
// for `group` (gr, gc; -1 = whole dimension) and sc = ceil(C / gc) scale columns. Host fp32 x and
// y (y must not alias x). Parallel over weight tiles on `pool` (null: the calling thread; never
// from inside a parallel_for of `pool`). Scratch is per thread.
void cpu_fp8_gemm_xwt(const float* x, int64_t n, const uint8_t* codes, const float* scale,
                      int64_t R, int64_t C, GroupShape group, float* y, ThreadPool* pool);

// out [n, width] = rows quantized per token per `group` channels (-1: the whole row) by
// quantize_fp8_e4m3_group (framework/core/fp8.h), as codes x scales in fp32. out may be rows.
void cpu_fake_quantize_fp8_rows(const float* rows, int64_t n, int64_t width, int64_t group,
                                float* out);

}  // namespace mg
