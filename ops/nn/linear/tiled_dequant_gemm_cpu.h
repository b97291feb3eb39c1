// The loop every quantized CPU GEMM shares: y [n, R] = x [n, C] . W^T where W's rows are
// dequantized into F32 one tile of kDequantTileRows at a time by the caller's `fill_tile`
// (never the whole matrix), each tile multiplied with cpu_gemm_xwt. Scratch is per thread.
#pragma once

#include <cstdint>
#include <functional>

namespace mg {

class ThreadPool;

inline constexpr int64_t kDequantTileRows = 128;

// fill_tile(r0, rows, tile) writes weight rows [r0, r0 + rows) as F32 into tile [rows, C].
using DequantTileFill = std::function<void(int64_t r0, int64_t rows, float* tile)>;

// Host fp32 x and y (y must not alias x). Parallel over tiles on `pool` (null: the calling
// thread; never from inside a parallel_for of `pool`).
void cpu_tiled_dequant_gemm_xwt(const float* x, int64_t n, int64_t R, int64_t C,
                                const DequantTileFill& fill_tile, float* y, ThreadPool* pool);

}  // namespace mg
