// FP4 codecs (framework/core/fp4.h): E2M1 against its bit fields, rounding and saturation, the
// nibble order, E8M0, NVFP4's global scales (multiplying and dividing), and dequantize_cpu for
// packed FP4 (framework/core/quant.h) against an independent decoder with partial last groups.
#include <array>
#include <cmath>

#include <gtest/gtest.h>

#include "framework/core/fp4.h"
#include "framework/core/fp8.h"
#include "framework/core/quant.h"
#include "tests/testing/test_util.h"

namespace mg {
namespace {

// E2M1 decoded from its fields (not from fp4.cc's table): e = bits 1-2, m = bit 0.
double independent_e2m1(uint8_t code) {
  const int e = (code >> 1) & 3, m = code & 1;
  const double mag = e == 0 ? 0.5 * m : std::ldexp(1.0 + 0.5 * m, e - 1);
  return (code & 8) ? -mag : mag;
}

TEST(Fp4Codec, E2M1MatchesTheFormat) {
  for (uint8_t c = 0; c < 16; ++c) {
    EXPECT_EQ(fp4_e2m1_to_float(c), static_cast<float>(independent_e2m1(c))) << int(c);
    EXPECT_EQ(float_to_fp4_e2m1(fp4_e2m1_to_float(c)), c) << int(c);  // -0 keeps its sign
  }
  // Round to nearest, ties to the even code, saturation at 6.
  const std::pair<float, float> cases[] = {
      {0.25f, 0.0f}, {0.26f, 0.5f}, {0.75f, 1.0f}, {1.25f, 1.0f}, {1.75f, 2.0f}, {2.5f, 2.0f},
      {3.5f, 4.0f},  {5.0f, 4.0f},  {5.01f, 6.0f}, {100.f, 6.0f}, {-2.6f, -3.0f}};
  for (const auto& [x, want] : cases) {
    EXPECT_EQ(fp4_e2m1_to_float(float_to_fp4_e2m1(x)), want) << x;
  }
  EXPECT_EQ(fp4_code_at(std::array<uint8_t, 1>{0x5A}.data(), 0), 0xA);  // low nibble: even column
  EXPECT_EQ(fp4_code_at(std::array<uint8_t, 1>{0x5A}.data(), 1), 0x5);
}

TEST(Fp4Codec, E8M0AndGlobalScales) {
  EXPECT_EQ(e8m0_to_float(127), 1.0f);
  EXPECT_EQ(e8m0_to_float(130), 8.0f);
  EXPECT_EQ(e8m0_to_float(0), std::ldexp(1.0f, -127));
  EXPECT_EQ(e8m0_to_float(254), std::ldexp(1.0f, 127));
  EXPECT_TRUE(std::isnan(e8m0_to_float(kE8M0NaN)));
  // NVFP4: E4M3 scales [2, 2, 1] with a global [2, 2] per (matrix, half of the rows).
  Tensor s = Tensor::empty_cpu(DType::kF8E4M3, {2, 2, 1});
  for (int i = 0; i < 4; ++i) fp8_codes(s)[i] = float_to_fp8_e4m3(1.5f * (i + 1));
  Tensor g = Tensor::empty_cpu(DType::kF32, {2, 2});
  for (int i = 0; i < 4; ++i) g.data<float>()[i] = 0.25f * (i + 1);
  const Tensor mul = fp4_group_scales_f32(s, g, false);
  const Tensor div = fp4_group_scales_f32(s, g, true);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(mul.data<float>()[i], 1.5f * (i + 1) * 0.25f * (i + 1));
    EXPECT_EQ(div.data<float>()[i], 1.5f * (i + 1) / (0.25f * (i + 1)));
  }
}

// Random packed codes [lead..., R, C / 2] and positive scales around 1 / (6 sqrt(C)) per group of
// `group_cols`, so that real values are O(1 / sqrt(C)) like moe_test::random_weights'.
std::pair<Tensor, WeightQuantization> random_fp4(const Shape& shape, int64_t group_cols,
                                                 uint32_t seed) {
  Shape stored = shape;
  stored.back() /= 2;
  const Tensor v = testing::random_tensor(stored, seed, 0.0f, 255.99f);
  Tensor codes = Tensor::empty_cpu(DType::kU8, stored);
  for (int64_t i = 0; i < v.numel(); ++i) {
    static_cast<uint8_t*>(codes.raw())[i] = static_cast<uint8_t>(v.data<float>()[i]);
  }
  WeightQuantization q;
  q.element = QuantElement::kFp4E2M1;
  q.group = {1, group_cols};
  const float base = 2.0f / (kFp4E2M1Max * std::sqrt(static_cast<float>(shape.back())));
  q.scale = testing::random_tensor(scale_shape_for(shape, q.group), seed + 1, 0.5f * base, base);
  return {codes, q};
}

// F32 values of packed codes, decoded independently (fp64, then rounded once).
Tensor independent_dequantize(const Tensor& codes, const WeightQuantization& q) {
  const int64_t R = codes.dim(-2), Cb = codes.dim(-1), C = 2 * Cb;
  Shape shape = codes.shape();
  shape.back() = C;
  Tensor out = Tensor::empty_cpu(DType::kF32, shape);
  const int64_t matrices = codes.numel() / (R * Cb), sc = q.scale.dim(-1);
  const uint8_t* in = static_cast<const uint8_t*>(codes.raw());
  for (int64_t m = 0; m < matrices; ++m) {
    for (int64_t r = 0; r < R; ++r) {
      for (int64_t c = 0; c < C; ++c) {
        const uint8_t byte = in[(m * R + r) * Cb + c / 2];
        const uint8_t code = c % 2 == 0 ? byte & 0xF : byte >> 4;
        out.data<float>()[(m * R + r) * C + c] = static_cast<float>(
            independent_e2m1(code) * q.scale.data<float>()[(m * R + r) * sc + c / q.group.cols]);
      }
    }
  }
  return out;
}

TEST(Fp4Codec, DequantizeCpuMatchesTheIndependentDecoder) {
  for (const int64_t g : {32, 16}) {
    // 3 x 5 x 40: C = 40 is not a multiple of 32 (a partial last group of 8).
    const auto [codes, q] = random_fp4({3, 5, 40}, g, 11);
    const Tensor got = dequantize_cpu(codes, q);
    const Tensor want = independent_dequantize(codes, q);
    ASSERT_EQ(got.shape(), Shape({3, 5, 40}));
    for (int64_t i = 0; i < got.numel(); ++i) {
      ASSERT_EQ(got.data<float>()[i], want.data<float>()[i]) << i;
    }
  }
}

}  // namespace
}  // namespace mg
