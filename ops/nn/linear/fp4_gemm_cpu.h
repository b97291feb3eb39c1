// FP4 E2M1 weights (MXFP4, NVFP4; framework/core/fp4.h) on the CPU: the GEMM that reads packed
// codes and dequantizes one tile of 128 weight rows at a time into F32 (code x effective group
// scale; the loop is ops/nn/linear/tiled_dequant_gemm_cpu.h), never the whole matrix. Used by the
// FP4 linear and the cpu_fp4 MoE experts.
#pragma once

#include <cstdint>

namespace mg {

class ThreadPool;

// y [n, R] = x [n, C] . W^T, W [R, C] the FP4 matrix `packed` [R, C / 2] (low nibble = even
// column) with F32 scales `scale` [R, ceil(C / group_cols)]. Host fp32 x and y (y must not alias
// x). Parallel over weight tiles on `pool` (null: the calling thread; never from inside a
// parallel_for of `pool`). Scratch is per thread.
void cpu_fp4_gemm_xwt(const float* x, int64_t n, const uint8_t* packed, const float* scale,
                      int64_t R, int64_t C, int64_t group_cols, float* y, ThreadPool* pool);

}  // namespace mg
