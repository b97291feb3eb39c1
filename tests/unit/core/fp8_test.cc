// FP8 codecs: every code decodes to the value its bit fields say, encoding is the exact inverse
// on representable values, rounds to nearest with ties to even at every midpoint, and handles
// zero signs, subnormals, overflow and NaN as PyTorch's Float8_e4m3fn / Float8_e5m2 do.
#include <cmath>
#include <cstdint>
#include <limits>

#include <gtest/gtest.h>

#include "framework/core/fp8.h"

namespace mg {
namespace {

struct Codec {
  const char* name;
  float (*to_float)(uint8_t);
  uint8_t (*from_float)(float);
  uint8_t max_finite;
};

const Codec kCodecs[] = {{"e4m3", fp8_e4m3_to_float, float_to_fp8_e4m3, 0x7E},
                         {"e5m2", fp8_e5m2_to_float, float_to_fp8_e5m2, 0x7B}};

TEST(Fp8, DecodesHandPickedCodes) {
  EXPECT_EQ(fp8_e4m3_to_float(0x00), 0.0f);
  EXPECT_EQ(fp8_e4m3_to_float(0x38), 1.0f);          // exponent 7 = bias
  EXPECT_EQ(fp8_e4m3_to_float(0x7E), 448.0f);        // largest finite
  EXPECT_EQ(fp8_e4m3_to_float(0x01), 0x1p-9f);       // smallest subnormal: 1/8 * 2^-6
  EXPECT_EQ(fp8_e4m3_to_float(0x08), 0x1p-6f);       // smallest normal
  EXPECT_EQ(fp8_e4m3_to_float(0xC4), -3.0f);         // sign, exponent 8, mantissa 0b100
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_float(0x7F)));  // the only NaN pattern (and 0xFF)
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_float(0xFF)));
  EXPECT_EQ(fp8_e4m3_to_float(0x78), 256.0f);  // exponent 15 is finite in e4m3fn

  EXPECT_EQ(fp8_e5m2_to_float(0x3C), 1.0f);
  EXPECT_EQ(fp8_e5m2_to_float(0x7B), 57344.0f);
  EXPECT_EQ(fp8_e5m2_to_float(0x01), 0x1p-16f);
  EXPECT_EQ(fp8_e5m2_to_float(0x7C), std::numeric_limits<float>::infinity());
  EXPECT_EQ(fp8_e5m2_to_float(0xFC), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(fp8_e5m2_to_float(0x7D)));
}

TEST(Fp8, EncodingInvertsDecodingOnEveryCode) {
  for (const Codec& c : kCodecs) {
    for (int code = 0; code < 256; ++code) {
      const float v = c.to_float(static_cast<uint8_t>(code));
      if (std::isnan(v)) {
        EXPECT_TRUE(std::isnan(c.to_float(c.from_float(v)))) << c.name << " code " << code;
        continue;
      }
      EXPECT_EQ(c.from_float(v), code) << c.name << " value " << v;
    }
  }
}

TEST(Fp8, RoundsToNearestTiesToEvenBetweenEveryPairOfNeighbours) {
  for (const Codec& c : kCodecs) {
    for (int code = 0; code < c.max_finite; ++code) {
      for (int sign : {0x00, 0x80}) {
        const uint8_t lo = static_cast<uint8_t>(sign | code);
        const uint8_t hi = static_cast<uint8_t>(sign | (code + 1));
        const float a = c.to_float(lo);
        const float b = c.to_float(hi);
        const float mid = (a + b) / 2;  // exact: fp8 neighbours are far apart in fp32
        const uint8_t even = (code % 2 == 0) ? lo : hi;
        EXPECT_EQ(c.from_float(mid), even) << c.name << " between " << a << " and " << b;
        EXPECT_EQ(c.from_float(std::nextafter(mid, a)), lo) << c.name << " below " << mid;
        EXPECT_EQ(c.from_float(std::nextafter(mid, b)), hi) << c.name << " above " << mid;
      }
    }
  }
}

TEST(Fp8, OverflowUnderflowAndSpecialsFollowTorch) {
  // e4m3fn: 464 is the tie between 448 (even mantissa) and the NaN pattern: it rounds to 448;
  // anything above becomes NaN, as c10::Float8_e4m3fn does (no saturation).
  EXPECT_EQ(float_to_fp8_e4m3(464.0f), 0x7E);
  EXPECT_EQ(float_to_fp8_e4m3(-464.0f), 0xFE);
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_float(float_to_fp8_e4m3(464.5f))));
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_float(float_to_fp8_e4m3(1e6f))));
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_float(float_to_fp8_e4m3(INFINITY))));
  // e5m2: 61440 ties between 57344 (odd mantissa) and infinity: rounds to infinity.
  EXPECT_EQ(float_to_fp8_e5m2(61439.0f), 0x7B);
  EXPECT_EQ(float_to_fp8_e5m2(61440.0f), 0x7C);
  EXPECT_EQ(float_to_fp8_e5m2(-INFINITY), 0xFC);
  // Below half the smallest subnormal: zero, keeping the sign; exactly half ties to zero (even).
  EXPECT_EQ(float_to_fp8_e4m3(0x1p-10f), 0x00);
  EXPECT_EQ(float_to_fp8_e4m3(-0x1p-10f), 0x80);
  EXPECT_EQ(float_to_fp8_e4m3(0x1.000002p-10f), 0x01);
  EXPECT_EQ(float_to_fp8_e4m3(-0.0f), 0x80);
  EXPECT_EQ(float_to_fp8_e5m2(1e-30f), 0x00);
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_float(float_to_fp8_e4m3(NAN))));
  EXPECT_TRUE(std::isnan(fp8_e5m2_to_float(float_to_fp8_e5m2(NAN))));
}

TEST(Fp8, ActivationGroupQuantisationUsesAmaxOver448) {
  // amax 3.5 -> scale 3.5/448 = 1/128: every value is x * 128 rounded to e4m3.
  const float x[5] = {3.5f, -1.0f, 0.01f, 0.0f, -3.5f};
  uint8_t q[5];
  const float scale = quantize_fp8_e4m3_group(x, 5, q);
  EXPECT_EQ(scale, 3.5f / 448.0f);
  EXPECT_EQ(q[0], 0x7E);  // 448
  EXPECT_EQ(q[4], 0xFE);  // -448
  EXPECT_EQ(fp8_e4m3_to_float(q[1]), -128.0f);
  EXPECT_EQ(q[2], float_to_fp8_e4m3(0.01f / scale));
  EXPECT_EQ(q[3], 0x00);
  for (int i = 0; i < 5; ++i) EXPECT_NEAR(fp8_e4m3_to_float(q[i]) * scale, x[i], 0.07f * 3.5f);
  // An all-zero group gets the floor's finite scale and zero codes.
  const float zeros[3] = {0.0f, 0.0f, 0.0f};
  EXPECT_EQ(quantize_fp8_e4m3_group(zeros, 3, q), kFp8ActAmaxFloor / 448.0f);
  EXPECT_EQ(q[0] | q[1] | q[2], 0);
}

}  // namespace
}  // namespace mg
