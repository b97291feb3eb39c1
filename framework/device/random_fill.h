// Deterministic random tensors for benchmarks and random-weight models: element i of a tensor
// filled with `seed` is uniform_at(seed, i, center, scale) (random_uniform.h), the same value on
// the host and on a GPU, and a buffer of any size fills in parallel (one launch on a GPU).
#pragma once

#include <cstdint>

#include "framework/core/fp4_scale_bytes.h"
#include "framework/core/tensor.h"
#include "framework/device/random_uniform.h"
#include "framework/device/stream.h"

namespace mg {

// Fills `t` (F32, F16 or BF16, on any device; rounded to nearest even); queued on `stream` on
// GPUs, done on return with a null stream.
void fill_uniform(const Tensor& t, uint64_t seed, float center, float scale, Stream* stream);

// The GPU halves of the random quantized weights (framework/compile/random_quantized_weights.h,
// which makes the host's), element for element the same values; queued on `stream`, done on
// return with a null stream. Each throws for a tensor not on a GPU.
// U8 `bytes`: floor(uniform_at(seed, i, 128, 128)) (random FP4 code pairs).
void fill_random_bytes(const Tensor& bytes, uint64_t seed, Stream* stream);
// F32 `scale`: uniform_at(seed, i, 1, 0.5) * base, rounded to `grid` (round_fp4_scale: FP4 scales
// that have E8M0 or E4M3 x `global` codes).
void fill_random_scales(const Tensor& scale, uint64_t seed, float base, Stream* stream,
                        Fp4ScaleGrid grid = Fp4ScaleGrid::kF32, float global = 1.0f);
// Canonical integer `codes` (framework/core/int_quant.h) of `bits` [rows, row bytes] with F32
// `scale` and, unsigned, `zero` [rows, groups]: the values uniform_at(seed, i, 0, range) of a
// [rows, C] weight quantized per row and group of `group_cols` columns as quantize_int_rows does.
void fill_random_int_codes(const Tensor& codes, const Tensor& scale, const Tensor& zero, int64_t C,
                           int64_t group_cols, int bits, bool is_signed, uint64_t seed, float range,
                           Stream* stream);

}  // namespace mg
