// FP8 <-> fp32 conversion on the host, with PyTorch's semantics (c10::Float8_e4m3fn,
// c10::Float8_e5m2), which is what checkpoints were quantised with:
//   e4m3fn: 1 sign, 4 exponent (bias 7), 3 mantissa bits; no infinities; 0x7F/0xFF are NaN;
//           largest finite 448. Values that round past 448 (|x| > 464; 464 itself is a tie and
//           rounds to even, 448) become NaN, as in torch: quantisers scale into range first.
//   e5m2:   1 sign, 5 exponent (bias 15), 2 mantissa bits; IEEE-like: infinities and NaNs;
//           largest finite 57344; values that round past it become +-inf.
// Rounding is to nearest, ties to even, subnormals included. NaN in gives NaN out.
#pragma once

#include <cstdint>

namespace mg {

inline constexpr float kFp8E4M3Max = 448.0f;
inline constexpr float kFp8E5M2Max = 57344.0f;

float fp8_e4m3_to_float(uint8_t code);
uint8_t float_to_fp8_e4m3(float f);

float fp8_e5m2_to_float(uint8_t code);
uint8_t float_to_fp8_e5m2(float f);

}  // namespace mg
