// The one-byte scale codes of FP4 weights, on the host and in CUDA kernels alike:
//   E8M0 (MXFP4: one per 32 values): 2^(code - 127), code 0..254 (0xFF is NaN, never written here)
//   E4M3 (NVFP4: one per 16 values, times an F32 global scale): 1 sign, 4 exponent (bias 7), 3
//        mantissa bits, subnormals m / 8 * 2^-6, max 448 (code 0x7E); 0x7F is NaN.
// framework/core/fp4.h decodes stored checkpoints on the host; these are what the byte-scale
// layouts (cuda_fp4) encode F32 scales back into, and what random FP4 weights round their scales
// to so that they have such codes. Only IEEE-exact operations (ldexp, frexp, rint), so the host and
// a GPU agree bit for bit.
#pragma once

#include <math.h>

#include <cstdint>

#include "framework/device/host_device.h"

namespace mg {

// 2^(code - 127) (code 0: 2^-127, an F32 subnormal; code 0xFF is not a value here).
MG_HOST_DEVICE inline float e8m0_scale_value(uint32_t code) {
  return ldexpf(1.0f, static_cast<int>(code) - 127);
}

// The E8M0 code of the largest power of two <= x (x > 0 finite; clamped to 0..254).
MG_HOST_DEVICE inline uint32_t e8m0_floor_code(float x) {
  int e = 0;
  frexpf(x, &e);  // x = f 2^e, f in [0.5, 1): the largest power of two <= x is 2^(e - 1)
  const int code = e - 1 + 127;
  return static_cast<uint32_t>(code < 0 ? 0 : code > 254 ? 254 : code);
}

// The value of E4M3 code `code` (bits 0..7; 0x7F / 0xFF read as 480, never written here).
MG_HOST_DEVICE inline float e4m3_scale_value(uint32_t code) {
  const int e = static_cast<int>((code >> 3) & 0xFu), m = static_cast<int>(code & 7u);
  const float mag =
      e == 0 ? ldexpf(static_cast<float>(m), -9) : ldexpf(static_cast<float>(8 + m), e - 10);
  return (code & 0x80u) != 0 ? -mag : mag;
}

// The E4M3 code nearest to x (ties to even), saturating at +-448; x must not be NaN.
MG_HOST_DEVICE inline uint32_t e4m3_nearest_code(float x) {
  const uint32_t sign = x < 0.0f ? 0x80u : 0u;
  const float a = fabsf(x);
  if (a >= 448.0f) return sign | 0x7Eu;
  if (a < 0.015625f) {  // below 2^-6: subnormals m 2^-9 (m = 8 is code 0x08, 2^-6)
    return sign | static_cast<uint32_t>(rintf(ldexpf(a, 9)));
  }
  int e = 0;
  const float f = frexpf(a, &e);  // a = (2 f) 2^(e - 1), 2 f in [1, 2)
  // Mantissa steps of 1/8: rint of (2f - 1) * 8 = 16 f - 8 in 0..8; 8 carries into the exponent.
  const uint32_t m = static_cast<uint32_t>(rintf(16.0f * f - 8.0f));
  const uint32_t code = (static_cast<uint32_t>(e - 1 + 7) << 3) + m;
  return sign | (code > 0x7Eu ? 0x7Eu : code);
}

// Whether F32 scale `v` is exactly an E8M0 value (MXFP4) or, within F32 rounding (2^-21 relative),
// an E4M3 value times `global` (NVFP4): the scales a one-byte scale layout (cuda_fp4) can hold.
// `code` receives the byte (E8M0 code, or E4M3 code of v / global; 0 when there is none).
MG_HOST_DEVICE inline bool fp4_scale_byte(float v, bool e8m0, float global, uint32_t* code) {
  if (e8m0) {
    *code = e8m0_floor_code(v);
    return v == e8m0_scale_value(*code);
  }
  const float x = v / global;
  if (!(x == x) || !(fabsf(x) < 1e30f)) {  // NaN or huge: no code
    *code = 0u;
    return false;
  }
  *code = e4m3_nearest_code(x);
  return fabsf(e4m3_scale_value(*code) * global - v) <= fabsf(v) * 4.76837158e-7f;  // 2^-21
}

// Where random FP4 scales are rounded to (framework/compile/random_quantized_weights.h).
enum class Fp4ScaleGrid : int32_t {
  kF32,   // any F32
  kE8M0,  // down to a power of two (MXFP4)
  kE4M3,  // to the nearest E4M3 value times `global` (a power of two: the product is exact)
};

MG_HOST_DEVICE inline float round_fp4_scale(float x, Fp4ScaleGrid grid, float global) {
  switch (grid) {
    case Fp4ScaleGrid::kF32:
      return x;
    case Fp4ScaleGrid::kE8M0:
      return e8m0_scale_value(e8m0_floor_code(x));
    case Fp4ScaleGrid::kE4M3:
      return e4m3_scale_value(e4m3_nearest_code(x / global)) * global;
  }
  return x;
}

}  // namespace mg
