// FP4 codecs (framework/core/fp4.h): E2M1 against its bit fields, rounding and saturation, the
// nibble order, E8M0, NVFP4's global scales (multiplying and dividing), and dequantize_cpu for
// packed FP4 (framework/core/quant.h) against an independent decoder with partial last groups;
// the one-byte scale codes of fp4_scale_bytes.h.
#include <array>
#include <cmath>

#include <gtest/gtest.h>

#include "framework/core/fp4.h"
#include "framework/core/fp4_scale_bytes.h"
#include "framework/core/fp8.h"
#include "framework/core/quant.h"
#include "tests/testing/fp4_weights.h"
#include "tests/testing/test_util.h"

namespace mg {
namespace {

using testing::independent_dequantize;
using testing::independent_e2m1;
using testing::random_fp4;

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

// The scale bytes of framework/core/fp4_scale_bytes.h (what cuda_fp4 and random FP4 weights
// use) against framework/core/fp8.h's E4M3 and fp4.h's E8M0: every code decodes to the same
// value and encodes back to itself; in-between values round to the nearest; random scales land on
// the grids.
TEST(Fp4Codec, ScaleBytesMatchTheFormats) {
  for (uint32_t c = 0; c <= 254; ++c) {
    EXPECT_EQ(e8m0_scale_value(c), e8m0_to_float(static_cast<uint8_t>(c))) << c;
    EXPECT_EQ(e8m0_floor_code(e8m0_scale_value(c)), c) << c;
    if (c >= 1) {
      EXPECT_EQ(e8m0_floor_code(1.999f * e8m0_scale_value(c - 1)), c - 1) << c;
    }
  }
  for (uint32_t c = 0; c < 256; ++c) {
    if ((c & 0x7F) == 0x7F) continue;  // NaN
    const float v = e4m3_scale_value(c);
    EXPECT_EQ(v, fp8_e4m3_to_float(static_cast<uint8_t>(c))) << c;
    if ((c & 0x7F) != 0) {
      EXPECT_EQ(e4m3_nearest_code(v), c) << c;
    }
  }
  // Nearest (as fp8.h rounds) between codes, subnormals and saturation included.
  for (const float x : {0.0013f, 0.003f, 0.0155f, 0.6f, 1.06f, 1.07f, 17.0f, 300.0f, 447.0f, 460.0f,
                        1000.0f, -0.6f}) {
    EXPECT_EQ(e4m3_scale_value(e4m3_nearest_code(x)),
              fp8_e4m3_to_float(float_to_fp8_e4m3(std::fmin(std::fmax(x, -448.0f), 448.0f))))
        << x;
  }
  EXPECT_EQ(round_fp4_scale(0.3f, Fp4ScaleGrid::kF32, 1.0f), 0.3f);
  EXPECT_EQ(round_fp4_scale(0.3f, Fp4ScaleGrid::kE8M0, 1.0f), 0.25f);
  EXPECT_EQ(round_fp4_scale(0.3f, Fp4ScaleGrid::kE4M3, 0.125f), 2.5f * 0.125f);  // 2.4 -> 2.5
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
