#include "framework/core/fp4.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "framework/core/error.h"
#include "framework/core/fp8.h"

namespace mg {

namespace {

constexpr float kE2M1Magnitude[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};

}  // namespace

float fp4_e2m1_to_float(uint8_t code) {
  const float m = kE2M1Magnitude[code & 0x7];
  return (code & 0x8) ? -m : m;
}

uint8_t float_to_fp4_e2m1(float x) {
  const uint8_t sign = std::signbit(x) ? 0x8 : 0x0;
  const float a = std::fabs(x);
  // Midpoints between neighbouring magnitudes; a tie goes to the even code.
  uint8_t code;
  if (a <= 0.25f) {
    code = 0;
  } else if (a < 0.75f) {
    code = 1;
  } else if (a <= 1.25f) {
    code = 2;
  } else if (a < 1.75f) {
    code = 3;
  } else if (a <= 2.5f) {
    code = 4;
  } else if (a < 3.5f) {
    code = 5;
  } else if (a <= 5.0f) {
    code = 6;
  } else {
    code = 7;
  }
  return sign | code;
}

Shape fp4_logical_shape(const Shape& packed) {
  MG_ASSERT(!packed.empty(), "packed FP4 codes of rank 0");
  Shape s = packed;
  s.back() *= 2;
  return s;
}

float e8m0_to_float(uint8_t code) {
  if (code == kE8M0NaN) return std::numeric_limits<float>::quiet_NaN();
  return std::ldexp(1.0f, static_cast<int>(code) - 127);
}

Tensor fp4_group_scales_f32(const Tensor& scale, const Tensor& global, bool global_divides) {
  MG_ASSERT(scale.device().is_cpu() && scale.rank() >= 2, "fp4 scales {}", scale.str());
  Tensor out;
  if (scale.dtype() == DType::kU8 || scale.dtype() == DType::kF8E4M3) {
    const bool e8m0 = scale.dtype() == DType::kU8;
    out = Tensor::empty_cpu(DType::kF32, scale.shape());
    const uint8_t* in = static_cast<const uint8_t*>(scale.raw());
    float* dst = out.data<float>();
    for (int64_t i = 0; i < scale.numel(); ++i) {
      dst[i] = e8m0 ? e8m0_to_float(in[i]) : fp8_e4m3_to_float(in[i]);
    }
  } else {
    out = to_f32_cpu(scale);  // a copy, scaled in place below
  }
  if (!global.defined()) return out;
  const Tensor g = to_f32_cpu(global);
  const int64_t R = out.dim(-2), C = out.dim(-1);
  const int64_t S = g.dim(-1);
  const int64_t matrices = R * C == 0 ? 0 : out.numel() / (R * C);
  MG_ASSERT(S >= 1 && R % S == 0 && g.numel() == matrices * S, "global scale {} for scales {}",
            g.str(), out.str());
  const int64_t rows_per = R / S;
  float* s = out.data<float>();
  const float* gs = g.data<float>();
  for (int64_t m = 0; m < matrices; ++m) {
    for (int64_t r = 0; r < R; ++r) {
      const float f = gs[m * S + r / rows_per];
      float* row = s + (m * R + r) * C;
      for (int64_t c = 0; c < C; ++c) row[c] = global_divides ? row[c] / f : row[c] * f;
    }
  }
  return out;
}

}  // namespace mg
