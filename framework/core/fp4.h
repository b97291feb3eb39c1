// FP4 (E2M1) codes and their scale encodings on the host, as the MXFP4 (OCP microscaling, GPT-OSS)
// and NVFP4 (ModelOpt, compressed-tensors) checkpoints define them:
//   e2m1: 1 sign (bit 3), 2 exponent, 1 mantissa bits; the magnitudes of codes 0..7 are
//         {0, 0.5, 1, 1.5, 2, 3, 4, 6}; no infinities or NaN. Two codes per byte, the element with
//         the even column index in the low nibble (GPT-OSS `*_blocks`, ModelOpt /
//         compressed-tensors `weight` / `weight_packed`).
//   e8m0: an unsigned power-of-two scale 2^(code - 127); code 0xFF is NaN (MXFP4's one scale per 32
//         values).
// NVFP4's per-16 scales are F8_E4M3 (framework/core/fp8.h) times an F32 global scale.
#pragma once

#include <cstdint>

#include "framework/core/tensor.h"

namespace mg {

inline constexpr float kFp4E2M1Max = 6.0f;
inline constexpr uint8_t kE8M0NaN = 0xFF;

// The value of 4-bit code `code` (0..15).
float fp4_e2m1_to_float(uint8_t code);
// The nearest e2m1 code, ties to even (0.25 -> 0, 0.75 -> 1, 2.5 -> 2, 5 -> 4), saturating at +-6
// (compressed-tensors' and ModelOpt's quantizers round the same way). x must not be NaN.
uint8_t float_to_fp4_e2m1(float x);
// Element c of packed row `row` (low nibble for even c).
inline uint8_t fp4_code_at(const uint8_t* row, int64_t c) {
  const uint8_t byte = row[c >> 1];
  return (c & 1) ? static_cast<uint8_t>(byte >> 4) : static_cast<uint8_t>(byte & 0xF);
}

// In memory, FP4 codes are recognized by their dtype: packed FP4 E2M1 is the only U8 code type
// (the graph file names it, TensorInfo.quantization.element; the verifier checks that they agree).
// The [..., R, C] values that packed codes [..., R, C / 2] hold.
Shape fp4_logical_shape(const Shape& packed);

// 2^(code - 127) (exact in fp32: 2^-127 is a subnormal); NaN for 0xFF.
float e8m0_to_float(uint8_t code);

// The F32 scale of every group of a FP4 weight, from its stored scale tensor `scale` (U8: E8M0, or
// F8_E4M3 / F32) and, when defined, its F32 global scale `global` [lead..., S] (row r of matrix
// [lead...] uses global[lead, r / (R / S)], R = scale.dim(-2)): scale x global (ModelOpt's
// weight_scale_2), or scale / global when `global_divides` (compressed-tensors'
// weight_global_scale, for its importer). Host tensors.
Tensor fp4_group_scales_f32(const Tensor& scale, const Tensor& global, bool global_divides);

}  // namespace mg
