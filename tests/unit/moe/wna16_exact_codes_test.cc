// The WNA16 decode kernels' exact integer-code arithmetic (ops/moe/cuda/wna16/wna16_exact_codes.h),
// emulated on the host bit for bit where the device does bit work (LOP3 / PRMT recipes) and with
// the IEEE rounding of BF16 / F16 / F32 where it does arithmetic (HSUB2, FADD, cvt):
// - the magic pairs hold 128 + q (BF16) / 1024 + q (F16) for every code in every nibble / byte
//   position, and one subtraction of the zero point's magic pair gives q - z exactly for every code
//   and every integer zero point (INT4 in BF16 and F16, INT8 in F16 and through F32 for BF16);
// - zero_code recovers every integer z from the stored pair {s, -z·s} over the scale range
//   wna16_zero_kind accepts, also when the quotient is 2 ulp off (the device's approximate
//   reciprocal);
// - a group's U = Σ x (q - z) summed the way a tensor core may (addends aligned to the largest and
//   truncated to a few bits) stays within n · 2^-bits of Σ |x (q - z)|: nothing cancels;
// - the FP4 path's bit placements: E2M1 codes (times the unbias power of two) and E4M3 scales
//   (times 2^120) are their values for every code, E8M0 bytes the power 2^(code - 127) in F32 and
//   as a BF16 pair.
// A wrong mask, shift, magic constant or selector moves a value by at least 1 (or by 2^4).
#include "ops/moe/cuda/wna16/wna16_exact_codes.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "framework/core/fp4.h"
#include "framework/core/fp4_scale_bytes.h"

namespace mg::cuda::wna16_exact {
namespace {

// The value of a BF16 / F16 bit pattern (zero, subnormal or normal: all these tests need).
double half_value(uint32_t bits, bool bf16) {
  bits &= 0xFFFFu;
  if (bf16) {
    const uint32_t f = bits << 16;
    float v;
    std::memcpy(&v, &f, 4);
    return v;
  }
  const int sign = (bits >> 15) & 1, exp = (bits >> 10) & 0x1F;
  const int mant = static_cast<int>(bits & 0x3FF);
  const double mag = exp == 0 ? std::ldexp(mant, -24) : std::ldexp(1024 + mant, exp - 25);
  return sign ? -mag : mag;
}

// x rounded to nearest-even with `digits` significant bits (BF16 8, F16 11, F32 24); normal range.
double round_digits(double x, int digits) {
  if (x == 0.0) return 0.0;
  int e = 0;
  std::frexp(x, &e);
  return std::ldexp(std::nearbyint(std::ldexp(x, digits - e)), e - digits);
}

// HSUB2 of one half of the pairs a, b (half 0: low 16 bits): the exact difference rounded to T.
double hsub(uint32_t a, uint32_t b, int half, bool bf16) {
  const double d = half_value(a >> (16 * half), bf16) - half_value(b >> (16 * half), bf16);
  return round_digits(d, bf16 ? 8 : 11);
}

class Int4 : public testing::TestWithParam<bool> {};

TEST_P(Int4, MagicPairMinusZeroIsExactForEveryCodeZeroAndPosition) {
  const bool bf16 = GetParam();
  std::mt19937 rng(11);
  std::uniform_int_distribution<uint32_t> any;
  for (int pos = 0; pos < 8; ++pos) {
    for (uint32_t q = 0; q < 16; ++q) {
      // Random neighbours, code q at nibble `pos`.
      const uint32_t word = (any(rng) & ~(0xFu << (4 * pos))) | (q << (4 * pos));
      uint32_t b[2][2];
      if (bf16) {
        int4_magic_pairs<true>(word, b);
      } else {
        int4_magic_pairs<false>(word, b);
      }
      // Nibble j = 2m + r in the low half of b[m][r], j + 4 in the high half.
      const int j = pos % 4, m = j / 2, r = j % 2, half = pos / 4;
      const double magic = bf16 ? 128.0 : 1024.0;
      ASSERT_EQ(half_value(b[m][r] >> (16 * half), bf16), magic + q) << "nibble " << pos;
      for (uint32_t z = 0; z < 16; ++z) {
        const uint32_t zm = bf16 ? zero_magic_pair<true>(z) : zero_magic_pair<false>(z);
        ASSERT_EQ(half_value(zm, bf16), magic + z);
        ASSERT_EQ(half_value(zm >> 16, bf16), magic + z);
        const double d = hsub(b[m][r], zm, half, bf16);
        ASSERT_EQ(d, static_cast<double>(q) - z) << "q " << q << " z " << z << " nibble " << pos;
        // The subtraction itself rounded nothing.
        ASSERT_EQ(d, half_value(b[m][r] >> (16 * half), bf16) - half_value(zm, bf16));
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Wna16ExactCodes, Int4, testing::Values(true, false),
                         [](const auto& info) { return info.param ? "bf16" : "f16"; });

TEST(Wna16ExactCodes, Int8F16MagicPairMinusZeroIsExactForEveryCodeAndZero) {
  for (int h = 0; h < 2; ++h) {
    for (uint32_t q = 0; q < 256; ++q) {
      // Code q at byte 2h (low half) and 255 - q at byte 2h + 1 (high half); others random.
      const uint32_t other = 0xA5u;
      const uint32_t word = h == 0 ? (other << 24 | other << 16 | (255 - q) << 8 | q)
                                   : ((255 - q) << 24 | q << 16 | other << 8 | other);
      const uint32_t pair = int8_magic_pair_f16(word, h);
      ASSERT_EQ(half_value(pair, false), 1024.0 + q);
      ASSERT_EQ(half_value(pair >> 16, false), 1024.0 + (255 - q));
      for (uint32_t z = 0; z < 256; ++z) {
        const uint32_t zm = zero_magic_pair<false>(z);
        ASSERT_EQ(hsub(pair, zm, 0, false), static_cast<double>(q) - z);
        ASSERT_EQ(hsub(pair, zm, 1, false), static_cast<double>(255 - q) - z);
      }
    }
  }
}

TEST(Wna16ExactCodes, Int8Bf16ThroughF32IsExactForEveryCodeAndZero) {
  for (int i = 0; i < 4; ++i) {
    for (uint32_t q = 0; q < 256; ++q) {
      const uint32_t word = (0x5Au * 0x01010101u & ~(0xFFu << (8 * i))) | (q << (8 * i));
      const uint32_t bits = int8_magic_f32_bits(word, i);
      float v;
      std::memcpy(&v, &bits, 4);
      ASSERT_EQ(v, 8388608.0f + static_cast<float>(q)) << "byte " << i;
      for (uint32_t z = 0; z < 256; ++z) {
        const uint32_t zbits = kMagicF32 | z;
        float zf;
        std::memcpy(&zf, &zbits, 4);
        const float d = v - zf;  // the device's FADD (F32, round to nearest)
        ASSERT_EQ(d, static_cast<float>(static_cast<int>(q) - static_cast<int>(z)));
        ASSERT_EQ(round_digits(d, 8), d) << "q - z = " << d << " is not exact in BF16";
      }
    }
  }
}

TEST(Wna16ExactCodes, ZeroCodeRecoversEveryIntegerZeroOverTheAcceptedScales) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<double> log2_scale(-100.0, 100.0), mantissa(1.0, 2.0);
  for (int trial = 0; trial < 2000; ++trial) {
    const float s = static_cast<float>(
        std::ldexp(mantissa(rng), static_cast<int>(log2_scale(rng))) * (trial % 2 ? -1.0 : 1.0));
    for (int z = 0; z < 256; ++z) {
      const float neg_zs = -static_cast<float>(z) * s;  // the pair the packer stores
      ASSERT_EQ(zero_code(s, neg_zs), z) << "s " << s;
      // The device multiplies by an approximate reciprocal (1 ulp, then a rounded product): a
      // quotient 2 ulp off still rounds to z.
      const float q = -neg_zs / s;
      for (const double off : {-2.0, 2.0}) {
        const float shifted = static_cast<float>(q + off * std::ldexp(1.0, std::ilogb(q) - 23));
        if (z > 0) {
          ASSERT_EQ(std::nearbyint(shifted), static_cast<float>(z)) << "s " << s;
        }
      }
    }
  }
  EXPECT_EQ(zero_code(0.0f, -0.0f), 0);  // s == 0: the weights are 0 for any z
}

// x · (q - z) summed as a tensor core may: per mma of 16 products, the accumulator and the products
// aligned to the largest and truncated below 2^(e_max - bits), then the exact sum truncated to
// `bits` significant bits.
double truncating_mma_sum(const std::vector<double>& terms, int bits) {
  double acc = 0.0;
  for (size_t k0 = 0; k0 < terms.size(); k0 += 16) {
    double largest = std::fabs(acc);
    for (size_t k = k0; k < k0 + 16 && k < terms.size(); ++k) {
      largest = std::max(largest, std::fabs(terms[k]));
    }
    if (largest == 0.0) continue;
    const double unit = std::ldexp(1.0, std::ilogb(largest) + 1 - bits);
    double sum = std::trunc(acc / unit) * unit;
    for (size_t k = k0; k < k0 + 16 && k < terms.size(); ++k) {
      sum += std::trunc(terms[k] / unit) * unit;
    }
    int e = 0;
    std::frexp(sum, &e);
    acc = sum == 0.0 ? 0.0 : std::ldexp(std::trunc(std::ldexp(sum, bits - e)), e - bits);
  }
  return acc;
}

TEST(Wna16ExactCodes, GroupSumOfExactProductsStaysWithinTheAccumulationBound) {
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> code4(0, 15), code8(0, 255);
  std::uniform_real_distribution<double> xs(-4.0, 4.0);
  for (const int code_bits : {4, 8}) {
    for (int trial = 0; trial < 200; ++trial) {
      const int z = code_bits == 4 ? code4(rng) : code8(rng);
      std::vector<double> terms(128);
      double exact = 0.0, magnitude = 0.0;
      for (double& term : terms) {
        const double x = round_digits(xs(rng), 8);  // a BF16 activation, |x| <= 4
        const int q = code_bits == 4 ? code4(rng) : code8(rng);
        term = x * (q - z);  // exact: 8 x 9 significant bits
        ASSERT_EQ(term, round_digits(term, 24));
        exact += term;
        magnitude += std::fabs(term);
      }
      for (const int bits : {24, 14}) {
        const double u = truncating_mma_sum(terms, bits);
        // Each of the 8 mmas truncates at most 17 addends by one unit of 2^(1 - bits) of the
        // largest, which is at most the running Σ |term|.
        const double bound = 8 * 18 * std::ldexp(magnitude, 1 - bits);
        EXPECT_LE(std::fabs(u - exact), bound)
            << code_bits << "-bit codes, z " << z << ", " << bits << " accumulation bits";
      }
    }
  }
}

// The E2M1 placement of the FP4 path (warp_block_gemm_e2m1): every code in every nibble, times the
// unbias power of two, is the code's E2M1 value (or twice it), subnormal codes 1 / 9 (0.5) and
// -0 included; the product has two significant bits, so the device's HMUL2 rounds nothing.
class E2M1 : public testing::TestWithParam<bool> {};  // BF16 (true) or F16

TEST_P(E2M1, PlacedPairsTimesTheUnbiasAreTheCodesValues) {
  const bool bf16 = GetParam();
  std::mt19937 rng(17);
  std::uniform_int_distribution<uint32_t> any;
  for (const bool doubled : {false, true}) {
    const uint32_t unbias = bf16 ? (doubled ? kE2M1Unbias<true, true> : kE2M1Unbias<true, false>)
                                 : (doubled ? kE2M1Unbias<false, true> : kE2M1Unbias<false, false>);
    const double factor = half_value(unbias, bf16);
    ASSERT_EQ(factor, std::ldexp(1.0, (bf16 ? 126 : 14) + (doubled ? 1 : 0)));
    ASSERT_EQ(half_value(unbias >> 16, bf16), factor);
    for (int pos = 0; pos < 8; ++pos) {
      for (uint32_t q = 0; q < 16; ++q) {
        const uint32_t word = (any(rng) & ~(0xFu << (4 * pos))) | (q << (4 * pos));
        uint32_t b[2][2];
        if (bf16) {
          e2m1_placed_pairs<true>(word, b);
        } else {
          e2m1_placed_pairs<false>(word, b);
        }
        // Nibble j = 2m + r in the low half of b[m][r], j + 4 in the high half.
        const int j = pos % 4, m = j / 2, r = j % 2, half = pos / 4;
        const uint32_t bits = (b[m][r] >> (16 * half)) & 0xFFFFu;
        const double v = half_value(bits, bf16) * factor;
        const double want =
            static_cast<double>(fp4_e2m1_to_float(static_cast<uint8_t>(q))) * (doubled ? 2.0 : 1.0);
        ASSERT_EQ(v, want) << "code " << q << " nibble " << pos << (doubled ? " doubled" : "");
        ASSERT_EQ(round_digits(v, bf16 ? 8 : 11), v);
        // The sign bit is the code's (-0 stays -0: the mma adds it as 0 either way).
        ASSERT_EQ((bits >> 15) != 0, (q & 8u) != 0) << "code " << q;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Wna16ExactCodes, E2M1, testing::Values(true, false),
                         [](const auto& info) { return info.param ? "bf16" : "f16"; });

TEST(Wna16ExactCodes, E8M0ScaleBitsAreTwoToTheCodeMinus127ForEveryCodeAndByte) {
  for (int unit = 0; unit < 4; ++unit) {
    for (uint32_t code = 0; code < 255; ++code) {
      // Code at byte `unit`, the other bytes ones and NaN codes (they must not leak in).
      const uint32_t bytes = (0xFFu * 0x01010101u & ~(0xFFu << (8 * unit))) | (code << (8 * unit));
      const uint32_t bits = e8m0_scale_bits(bytes, unit);
      float v;
      std::memcpy(&v, &bits, 4);
      ASSERT_EQ(v, std::ldexp(1.0f, static_cast<int>(code) - 127)) << "code " << code;
    }
  }
}

// The BF16 MXFP4 scale pair with E2M1's unbias folded in: 2^(code - 1 - shift) in both halves
// for every code up to 128 + shift, and every placed code times it is e2m1 · 2^(code - 127 -
// shift) exactly (a BF16 value, subnormals included: what one HMUL2 returns unrounded).
TEST(Wna16ExactCodes, E8M0UnbiasedPairTimesAPlacedCodeIsTheWeightOverTwoToTheShift) {
  const double least = std::ldexp(1.0, -133);  // BF16's least subnormal
  for (int shift = 0; shift <= kE8m0MaxShift; ++shift) {
    const uint32_t bias = e8m0_unbias_bias(shift);
    ASSERT_EQ(e8m0_shift_of(128u + static_cast<uint32_t>(shift)), shift);
    for (int unit = 0; unit < 4; ++unit) {
      for (uint32_t code = 0; code <= 128u + static_cast<uint32_t>(shift); ++code) {
        // Code at byte `unit`, the other bytes NaN codes (they must not leak in).
        const uint32_t bytes =
            (0xFFu * 0x01010101u & ~(0xFFu << (8 * unit))) | (code << (8 * unit));
        const uint32_t pair = e8m0_bf16_unbiased_pair(bytes, unit, bias);
        const double m = std::ldexp(1.0, static_cast<int>(code) - 1 - shift);
        ASSERT_EQ(half_value(pair, true), m) << "code " << code << " shift " << shift;
        ASSERT_EQ(half_value(pair >> 16, true), m) << "code " << code << " shift " << shift;
        for (uint32_t q = 0; q < 16; ++q) {
          uint32_t b[2][2];
          e2m1_placed_pairs<true>(q, b);  // nibble 0: the low half of b[0][0]
          const double v = half_value(b[0][0], true) * m;
          const double want = static_cast<double>(fp4_e2m1_to_float(static_cast<uint8_t>(q))) *
                              std::ldexp(1.0, static_cast<int>(code) - 127 - shift);
          ASSERT_EQ(v, want) << "code " << code << " shift " << shift << " q " << q;
          // A BF16 value: a multiple of the least subnormal, 8 significant bits where normal.
          ASSERT_EQ(std::fmod(std::fabs(v), least), 0.0) << "code " << code << " q " << q;
          if (std::fabs(v) >= std::ldexp(1.0, -126)) {
            ASSERT_EQ(round_digits(v, 8), v);
          }
        }
      }
    }
  }
}

TEST(Wna16ExactCodes, E4M3PlacedPairTimesTwoTo120IsTheScaleForEveryCode) {
  ASSERT_EQ(half_value(kE4M3UnbiasBf16, true), std::ldexp(1.0, 120));
  ASSERT_EQ(half_value(kE4M3UnbiasBf16 >> 16, true), std::ldexp(1.0, 120));
  for (uint32_t lo = 0; lo < 256; ++lo) {
    if ((lo & 0x7Fu) == 0x7Fu) continue;  // NaN: never a scale
    const uint32_t hi = lo ^ 0x80u;       // the other sign in the other half
    const uint32_t pair = e4m3_placed_pair_bf16(0xC3A50000u | hi << 8 | lo);
    const double factor = std::ldexp(1.0, 120);
    ASSERT_EQ(half_value(pair, true) * factor, static_cast<double>(e4m3_scale_value(lo)))
        << "code " << lo;
    ASSERT_EQ(half_value(pair >> 16, true) * factor, static_cast<double>(e4m3_scale_value(hi)))
        << "code " << hi;
  }
}

}  // namespace
}  // namespace mg::cuda::wna16_exact
