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

// Dynamic FP8 activation quantisation, one group (DeepSeek-V3's act_quant, HF's FP8Linear, vLLM's
// per-token-group quant: one group is 128 consecutive channels of one token):
//   amax  = max |x[i]|                                  (fp32)
//   scale = max(amax, kFp8ActAmaxFloor) / 448           (fp32 division; the floor is vLLM's eps:
//                                                        an all-zero group gets a finite scale
//                                                        and zero codes, where DeepSeek's kernel
//                                                        would divide by zero)
//   q[i]  = e4m3(x[i] / scale)                          (fp32 division, then RNE)
// so that x[i] ~ fp8_e4m3_to_float(q[i]) * scale. Every step is one IEEE operation, which the CUDA
// kernels repeat in the same order: both devices give the same codes and scales bit for bit.
// Returns the scale. x must be finite.
inline constexpr float kFp8ActAmaxFloor = 1e-10f;
float quantize_fp8_e4m3_group(const float* x, int64_t n, uint8_t* q);

// Static FP8 activation quantisation (compressed-tensors' static `input_scale`, vLLM's
// static_scaled_fp8_quant): q[i] = e4m3(clamp(x[i] / scale, -448, 448)) (fp32 division, clamp,
// RNE), so values past the calibrated range saturate instead of becoming NaN. scale > 0, finite.
void quantize_fp8_e4m3_static(const float* x, int64_t n, float scale, uint8_t* q);

}  // namespace mg
