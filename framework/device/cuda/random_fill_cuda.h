// Deterministic random device buffers for benchmarks: values uniform in
// [center - scale, center + scale) from a counter-based hash of (seed, index), so a buffer of any
// size fills in one launch on the GPU (host-side generation of a 22 GB expert layer would take
// minutes). framework/device/random_fill.h is the device-generic entry (same values on the host).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "framework/core/dtype.h"
#include "framework/core/fp4_scale_bytes.h"

namespace mg::cuda {

// data [n] of `dtype` (F32, F16 or BF16).
void fill_uniform(void* data, int64_t n, DType dtype, uint64_t seed, float center, float scale,
                  cudaStream_t stream);

// The device twins of the random quantized weights' generators
// (framework/compile/random_quantized_weights.h), element for element the same values.
// bytes [n]: floor(uniform_at(seed, i, 128, 128)) clamped to [0, 255] (random FP4 code pairs).
void fill_random_bytes(uint8_t* bytes, int64_t n, uint64_t seed, cudaStream_t stream);
// scale [n]: uniform_at(seed, i, 1, 0.5) * base, rounded to `grid` (round_fp4_scale).
void fill_random_scales(float* scale, int64_t n, uint64_t seed, float base, Fp4ScaleGrid grid,
                        float global, cudaStream_t stream);
// The values uniform_at(seed, r * C + c, 0, range) of `rows` rows of C columns quantized per row
// and group of `group_cols` columns (-1: the row) as quantize_int_rows does: canonical codes of
// `bits` (4: two per byte, the even column low) signed (symmetric) or not (zero points in `zero`).
void fill_random_int_codes(uint8_t* codes, float* scale, float* zero, int64_t rows, int64_t C,
                           int64_t group_cols, int bits, bool is_signed, uint64_t seed, float range,
                           cudaStream_t stream);

}  // namespace mg::cuda
