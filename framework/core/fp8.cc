#include "framework/core/fp8.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

namespace mg {
namespace {

// One FP8 layout: exponent and mantissa widths; the exponent bias is 2^(exp_bits-1) - 1.
struct Fp8Layout {
  int exp_bits;
  int man_bits;
  uint8_t max_finite_code;  // largest positive finite code
  uint8_t overflow_code;    // what a positive value rounding past max_finite_code becomes
  uint8_t nan_code;         // a positive NaN
  int bias() const { return (1 << (exp_bits - 1)) - 1; }
};

constexpr Fp8Layout kE4M3{4, 3, 0x7E, 0x7F, 0x7F};  // no infinities: overflow is NaN
constexpr Fp8Layout kE5M2{5, 2, 0x7B, 0x7C, 0x7E};  // overflow is +inf

// Exact in double: every FP8 value is a small integer times a power of two.
double decode(const Fp8Layout& l, uint8_t code) {
  const bool negative = code & 0x80;
  const int exp_field = (code & 0x7F) >> l.man_bits;
  const int man = code & ((1 << l.man_bits) - 1);
  const int max_exp_field = (1 << l.exp_bits) - 1;
  double magnitude;
  if (l.overflow_code == l.nan_code) {  // e4m3fn: only all-ones is NaN
    if ((code & 0x7F) == 0x7F) return std::numeric_limits<double>::quiet_NaN();
  } else if (exp_field == max_exp_field) {  // e5m2: IEEE specials
    if (man != 0) return std::numeric_limits<double>::quiet_NaN();
    return negative ? -std::numeric_limits<double>::infinity()
                    : std::numeric_limits<double>::infinity();
  }
  if (exp_field == 0) {
    magnitude = std::ldexp(static_cast<double>(man), 1 - l.bias() - l.man_bits);
  } else {
    magnitude =
        std::ldexp(static_cast<double>((1 << l.man_bits) + man), exp_field - l.bias() - l.man_bits);
  }
  return negative ? -magnitude : magnitude;
}

uint8_t encode(const Fp8Layout& l, float f) {
  if (std::isnan(f)) return l.nan_code;
  const uint8_t sign = std::signbit(f) ? 0x80 : 0x00;
  const double a = std::fabs(static_cast<double>(f));
  if (a == 0.0) return sign;
  if (std::isinf(a)) return static_cast<uint8_t>(sign | l.overflow_code);
  int exp2;
  std::frexp(a, &exp2);  // a = m * 2^exp2, m in [0.5, 1)
  // The quantum (value of one mantissa step) at a's binade, never finer than the subnormals'.
  const int min_normal_exp = 1 - l.bias();
  const int binade = std::max(exp2 - 1, min_normal_exp);
  const double steps = std::nearbyint(std::ldexp(a, l.man_bits - binade));  // ties to even
  // steps is in [0, 2^(man_bits+1)]; below 2^man_bits only in the subnormal binade. The code
  // is (biased exponent << man_bits) + (steps - 2^man_bits), which also carries a mantissa that
  // rounded up to 2^(man_bits+1) into the next exponent, and maps subnormals (exponent field 0).
  const long code_long =
      (static_cast<long>(binade - min_normal_exp) << l.man_bits) + static_cast<long>(steps);
  if (code_long > l.max_finite_code) return static_cast<uint8_t>(sign | l.overflow_code);
  return static_cast<uint8_t>(sign | code_long);
}

template <const Fp8Layout& L>
const std::array<float, 256>& decode_table() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t{};
    for (int c = 0; c < 256; ++c) t[c] = static_cast<float>(decode(L, static_cast<uint8_t>(c)));
    return t;
  }();
  return table;
}

}  // namespace

float fp8_e4m3_to_float(uint8_t code) {
  return decode_table<kE4M3>()[code];
}
uint8_t float_to_fp8_e4m3(float f) {
  return encode(kE4M3, f);
}
float fp8_e5m2_to_float(uint8_t code) {
  return decode_table<kE5M2>()[code];
}
uint8_t float_to_fp8_e5m2(float f) {
  return encode(kE5M2, f);
}

float quantize_fp8_e4m3_group(const float* x, int64_t n, uint8_t* q) {
  float amax = 0.0f;
  for (int64_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
  const float scale = std::max(amax, kFp8ActAmaxFloor) / kFp8E4M3Max;
  for (int64_t i = 0; i < n; ++i) q[i] = float_to_fp8_e4m3(x[i] / scale);
  return scale;
}

void quantize_fp8_e4m3_static(const float* x, int64_t n, float scale, uint8_t* q) {
  for (int64_t i = 0; i < n; ++i) {
    q[i] = float_to_fp8_e4m3(std::clamp(x[i] / scale, -kFp8E4M3Max, kFp8E4M3Max));
  }
}

}  // namespace mg
