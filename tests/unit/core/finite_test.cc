// find_non_finite: NaN and infinity by their bits in every float dtype (issue 18: NaN weights
// and logits must be found, never sampled).
#include "framework/core/finite.h"

#include <cmath>
#include <limits>
#include <vector>

#include <gtest/gtest.h>

#include "framework/core/half.h"

namespace mg {
namespace {

TEST(Finite, F32AndF64) {
  std::vector<float> f = {1.0f, -0.0f, 3.4e38f, 1e-45f};
  EXPECT_EQ(find_non_finite(f.data(), 4, DType::kF32), -1);
  f[2] = std::numeric_limits<float>::infinity();
  EXPECT_EQ(find_non_finite(f.data(), 4, DType::kF32), 2);
  f[1] = -std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(find_non_finite(f.data(), 4, DType::kF32), 1);
  std::vector<double> d = {1.0, 1e308, -std::numeric_limits<double>::infinity()};
  EXPECT_EQ(find_non_finite(d.data(), 2, DType::kF64), -1);
  EXPECT_EQ(find_non_finite(d.data(), 3, DType::kF64), 2);
}

TEST(Finite, SixteenAndEightBitFloats) {
  std::vector<uint16_t> bf = {float_to_bf16(1.0f), float_to_bf16(-3e38f), 0x7f80 /* +inf */};
  EXPECT_EQ(find_non_finite(bf.data(), 2, DType::kBF16), -1);
  EXPECT_EQ(find_non_finite(bf.data(), 3, DType::kBF16), 2);
  std::vector<uint16_t> h = {float_to_fp16(65504.0f), 0xfe00 /* NaN */};
  EXPECT_EQ(find_non_finite(h.data(), 1, DType::kF16), -1);
  EXPECT_EQ(find_non_finite(h.data(), 2, DType::kF16), 1);
  // E4M3 (fn): 0x7e is 448, the largest finite value; 0x7f / 0xff are NaN.
  std::vector<uint8_t> e4 = {0x7e, 0xfe, 0xff};
  EXPECT_EQ(find_non_finite(e4.data(), 2, DType::kF8E4M3), -1);
  EXPECT_EQ(find_non_finite(e4.data(), 3, DType::kF8E4M3), 2);
  // E5M2: 0x7b is 57344; 0x7c is +inf.
  std::vector<uint8_t> e5 = {0x7b, 0x7c};
  EXPECT_EQ(find_non_finite(e5.data(), 1, DType::kF8E5M2), -1);
  EXPECT_EQ(find_non_finite(e5.data(), 2, DType::kF8E5M2), 1);
}

TEST(Finite, IntegersAreAlwaysFinite) {
  std::vector<int32_t> i = {-1, 0x7f800000, -1};
  EXPECT_EQ(find_non_finite(i.data(), 3, DType::kI32), -1);
}

}  // namespace
}  // namespace mg
