// Integer weight-only codes (framework/core/int_quant.h): the canonical nibble order, the group
// quantizer's error bound, and the conversion of each checkpoint packing (GPTQ, AWQ,
// compressed-tensors), checked against packers written here from the formats' descriptions
// (docs/hf-moe-formats §6.3-6.4), over odd sizes, with zero points, v1 offsets, act-order g_idx
// and checkpoint matrices stacked per expert; bad values are errors naming the tensor.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include <gtest/gtest.h>

#include "framework/core/error.h"
#include "framework/core/int_quant.h"
#include "tests/testing/test_util.h"

namespace mg {
namespace {

// Random codes [M, R, C] of `bits` (unsigned), zeros [M, R, G], scales [M, R, G].
struct Codes {
  int64_t M, R, C, G, g;
  int bits;
  std::vector<int32_t> q;
  std::vector<int32_t> zero;
  std::vector<float> scale;
};

Codes random_codes(int64_t M, int64_t R, int64_t C, int64_t g, int bits, uint32_t seed) {
  std::mt19937 rng(seed);
  Codes k{M, R, C, g < 0 ? 1 : (C + g - 1) / g, g, bits, {}, {}, {}};
  std::uniform_int_distribution<int32_t> code(0, (1 << bits) - 1);
  std::uniform_real_distribution<float> sc(0.01f, 0.1f);
  for (int64_t i = 0; i < M * R * C; ++i) k.q.push_back(code(rng));
  for (int64_t i = 0; i < M * R * k.G; ++i) {
    k.zero.push_back(code(rng));
    k.scale.push_back(sc(rng));
  }
  return k;
}

int32_t packed_word(const std::vector<int32_t>& values, int bits) {
  uint32_t w = 0;
  for (size_t i = 0; i < values.size(); ++i) w |= static_cast<uint32_t>(values[i]) << (bits * i);
  return static_cast<int32_t>(w);
}

Tensor i32_tensor(Shape shape, const std::vector<int32_t>& v) {
  Tensor t = Tensor::empty_cpu(DType::kI32, std::move(shape));
  EXPECT_EQ(t.numel(), static_cast<int64_t>(v.size()));
  std::memcpy(t.raw(), v.data(), v.size() * sizeof(int32_t));
  return t;
}

Tensor f32_tensor(Shape shape, const std::vector<float>& v) {
  Tensor t = Tensor::empty_cpu(DType::kF32, std::move(shape));
  std::memcpy(t.raw(), v.data(), v.size() * sizeof(float));
  return t;
}

// real value the codes mean (no g_idx).
float real_of(const Codes& k, int64_t m, int64_t r, int64_t c, bool with_zero) {
  const int64_t grp = k.g < 0 ? 0 : c / k.g;
  const float z = with_zero ? static_cast<float>(k.zero[(m * k.R + r) * k.G + grp])
                            : static_cast<float>(1 << (k.bits - 1));
  return (static_cast<float>(k.q[(m * k.R + r) * k.C + c]) - z) *
         k.scale[(m * k.R + r) * k.G + grp];
}

void expect_dequantizes_to(const Tensor& codes, const WeightQuantization& q, const Codes& k,
                           bool with_zero) {
  const Tensor w = dequantize_cpu(codes, q);
  ASSERT_EQ(w.shape(), Shape({k.M, k.R, k.C}));
  for (int64_t m = 0; m < k.M; ++m) {
    for (int64_t r = 0; r < k.R; ++r) {
      for (int64_t c = 0; c < k.C; ++c) {
        ASSERT_EQ(w.data<float>()[(m * k.R + r) * k.C + c], real_of(k, m, r, c, with_zero))
            << m << " " << r << " " << c;
      }
    }
  }
}

TEST(IntQuant, CanonicalNibbleOrderIsLowFirst) {
  const int32_t values[] = {1, 2, 3, 4, 5};  // odd C: the last high nibble stays 0
  uint8_t bytes[3];
  pack_int_codes(values, 1, 5, QuantElement::kUInt4, bytes);
  EXPECT_EQ(bytes[0], 0x21);
  EXPECT_EQ(bytes[1], 0x43);
  EXPECT_EQ(bytes[2], 0x05);
  const int32_t signed_values[] = {-8, 7, -1};
  pack_int_codes(signed_values, 1, 3, QuantElement::kInt4, bytes);
  EXPECT_EQ(bytes[0], 0x78);
  EXPECT_EQ(int_code_at(bytes, QuantElement::kInt4, 0), -8);
  EXPECT_EQ(int_code_at(bytes, QuantElement::kInt4, 1), 7);
  EXPECT_EQ(int_code_at(bytes, QuantElement::kInt4, 2), -1);
  EXPECT_EQ(int_codes_shape(QuantElement::kUInt4, {3, 7, 33}), Shape({3, 7, 17}));
  EXPECT_EQ(int_codes_shape(QuantElement::kInt8, {7, 33}), Shape({7, 33}));
}

TEST(IntQuant, QuantizerErrorIsWithinHalfAStep) {
  const Tensor w = testing::random_tensor({3, 5, 77}, 7);
  for (QuantElement el :
       {QuantElement::kInt4, QuantElement::kUInt4, QuantElement::kInt8, QuantElement::kUInt8}) {
    for (int64_t g : {int64_t{32}, int64_t{-1}}) {
      auto [codes, q] = quantize_int_cpu(w, el, g);
      EXPECT_EQ(codes.shape(), int_codes_shape(el, w.shape()));
      EXPECT_EQ(q.zero_point.defined(), !quant_element_signed(el));
      const Tensor back = dequantize_cpu(codes, q);
      const int64_t G = q.scale.dim(-1);
      for (int64_t i = 0; i < w.numel(); ++i) {
        const int64_t row = i / 77, c = i % 77;
        const float step = q.scale.data<float>()[row * G + (g < 0 ? 0 : c / g)];
        ASSERT_LE(std::fabs(back.data<float>()[i] - w.data<float>()[i]), 0.5f * step + 1e-6f)
            << quant_element_name(el) << " g=" << g << " i=" << i;
      }
    }
  }
}

TEST(IntQuant, ConvertsCompressedTensorsPacking) {
  // [2 experts, 9 rows, 37 columns], group 16 (the last group is partial), 4 and 8 bits.
  for (int bits : {4, 8}) {
    const Codes k = random_codes(2, 9, 37, 16, bits, 11 + bits);
    const int64_t p = 32 / bits, words = (k.C + p - 1) / p, zrows = (k.R + p - 1) / p;
    std::vector<int32_t> packed, zeros;
    for (int64_t m = 0; m < k.M; ++m) {
      for (int64_t r = 0; r < k.R; ++r) {
        for (int64_t w = 0; w < words; ++w) {
          std::vector<int32_t> v;
          for (int64_t c = w * p; c < std::min(k.C, (w + 1) * p); ++c) {
            v.push_back(k.q[(m * k.R + r) * k.C + c]);
          }
          packed.push_back(packed_word(v, bits));
        }
      }
      // zero points packed along the output dimension: word [w, g] holds rows p*w .. p*w+p-1.
      for (int64_t w = 0; w < zrows; ++w) {
        for (int64_t g = 0; g < k.G; ++g) {
          std::vector<int32_t> v;
          for (int64_t r = w * p; r < std::min(k.R, (w + 1) * p); ++r) {
            v.push_back(k.zero[(m * k.R + r) * k.G + g]);
          }
          zeros.push_back(packed_word(v, bits));
        }
      }
    }
    StoredIntWeight s;
    s.element = bits == 4 ? QuantElement::kUInt4 : QuantElement::kUInt8;
    s.packing = IntPacking::kCompressedTensors;
    s.logical_shape = {k.M, k.R, k.C};
    s.group_cols = k.g;
    s.codes = i32_tensor({k.M, k.R, words}, packed);
    s.scale = f32_tensor({k.M, k.R, k.G}, k.scale);
    s.what = "w";
    // Symmetric: no zero tensor, the midpoint.
    auto [c0, q0] = convert_int_weight(s);
    expect_dequantizes_to(c0, q0, k, false);
    s.zero_point = i32_tensor({k.M, zrows, k.G}, zeros);
    auto [c1, q1] = convert_int_weight(s);
    expect_dequantizes_to(c1, q1, k, true);
  }
}

// GPTQ stores [in / 8, out] per checkpoint matrix; two matrices (gate, up) per expert.
TEST(IntQuant, ConvertsGptqPackingWithPiecesV1ZerosAndActOrder) {
  const int64_t M = 2, P = 2, Rp = 12, C = 40, g = 8;
  Codes k = random_codes(M, P * Rp, C, g, 4, 5);
  // v1 stores zero - 1: keep true zeros in [1, 15].
  for (int32_t& z : k.zero) z = std::max(z, 1);
  std::vector<int32_t> qweight, qzeros;
  std::vector<float> scales;
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t piece = 0; piece < P; ++piece) {
      for (int64_t w = 0; w < C / 8; ++w) {
        for (int64_t o = 0; o < Rp; ++o) {
          std::vector<int32_t> v;
          for (int64_t i = 8 * w; i < 8 * w + 8; ++i) {
            v.push_back(k.q[(m * k.R + piece * Rp + o) * C + i]);
          }
          qweight.push_back(packed_word(v, 4));
        }
      }
      for (int64_t grp = 0; grp < k.G; ++grp) {
        for (int64_t w = 0; w < (Rp + 7) / 8; ++w) {
          std::vector<int32_t> v;
          for (int64_t o = 8 * w; o < std::min(Rp, 8 * w + 8); ++o) {
            v.push_back(k.zero[(m * k.R + piece * Rp + o) * k.G + grp] - 1);
          }
          qzeros.push_back(packed_word(v, 4));
        }
        for (int64_t o = 0; o < Rp; ++o)
          scales.push_back(k.scale[(m * k.R + piece * Rp + o) * k.G + grp]);
      }
    }
  }
  StoredIntWeight s;
  s.element = QuantElement::kUInt4;
  s.packing = IntPacking::kGptq;
  s.logical_shape = {M, P * Rp, C};
  s.group_cols = g;
  s.codes = i32_tensor({M, P, C / 8, Rp}, qweight);
  s.scale = f32_tensor({M, P, k.G, Rp}, scales);
  s.zero_point = i32_tensor({M, P, k.G, (Rp + 7) / 8}, qzeros);
  s.zero_point_offset = 1;
  s.what = "experts.w13";
  auto [codes, q] = convert_int_weight(s);
  expect_dequantizes_to(codes, q, k, true);

  // Trivial g_idx (desc_act false) is dropped; a permuted one is kept and read.
  std::vector<int32_t> gidx;
  for (int64_t i = 0; i < M * P * C; ++i) gidx.push_back(static_cast<int32_t>((i % C) / g));
  s.g_idx = i32_tensor({M, P, C}, gidx);
  EXPECT_FALSE(convert_int_weight(s).second.g_idx.defined());
  std::mt19937 rng(3);
  for (int64_t mp = 0; mp < M * P; ++mp) {
    std::shuffle(gidx.begin() + mp * C, gidx.begin() + (mp + 1) * C, rng);
  }
  s.g_idx = i32_tensor({M, P, C}, gidx);
  auto [c2, q2] = convert_int_weight(s);
  ASSERT_TRUE(q2.g_idx.defined());
  const Tensor w = dequantize_cpu(c2, q2);
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t r = 0; r < k.R; ++r) {
      for (int64_t c = 0; c < C; ++c) {
        const int64_t grp = gidx[(m * P + r / Rp) * C + c];
        const float want =
            (static_cast<float>(k.q[(m * k.R + r) * C + c]) - k.zero[(m * k.R + r) * k.G + grp]) *
            k.scale[(m * k.R + r) * k.G + grp];
        ASSERT_EQ(w.data<float>()[(m * k.R + r) * C + c], want);
      }
    }
  }
  // Out-of-range g_idx and zero points are errors naming the tensor.
  gidx[5] = static_cast<int32_t>(k.G);
  s.g_idx = i32_tensor({M, P, C}, gidx);
  EXPECT_THROW(
      {
        try {
          convert_int_weight(s);
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("experts.w13: g_idx[5]"), std::string::npos)
              << e.what();
          throw;
        }
      },
      Error);
  s.g_idx = Tensor();
  std::vector<int32_t> bad = qzeros;
  bad[0] = static_cast<int32_t>(0xF);  // 15 + 1 > 15
  s.zero_point = i32_tensor({M, P, k.G, (Rp + 7) / 8}, bad);
  EXPECT_THROW(convert_int_weight(s), Error);
}

TEST(IntQuant, ConvertsAwqPacking) {
  constexpr int kOrder[8] = {0, 2, 4, 6, 1, 3, 5, 7};  // AWQ's pack order
  const int64_t M = 1, R = 24, C = 35, g = 16;
  const Codes k = random_codes(M, R, C, g, 4, 9);
  std::vector<int32_t> qweight, qzeros;
  std::vector<float> scales;
  for (int64_t i = 0; i < C; ++i) {
    for (int64_t w = 0; w < R / 8; ++w) {
      std::vector<int32_t> v;
      for (int nib = 0; nib < 8; ++nib) v.push_back(k.q[(8 * w + kOrder[nib]) * C + i]);
      qweight.push_back(packed_word(v, 4));
    }
  }
  for (int64_t grp = 0; grp < k.G; ++grp) {
    for (int64_t w = 0; w < R / 8; ++w) {
      std::vector<int32_t> v;
      for (int nib = 0; nib < 8; ++nib) v.push_back(k.zero[(8 * w + kOrder[nib]) * k.G + grp]);
      qzeros.push_back(packed_word(v, 4));
    }
    for (int64_t o = 0; o < R; ++o) scales.push_back(k.scale[o * k.G + grp]);
  }
  StoredIntWeight s;
  s.element = QuantElement::kUInt4;
  s.packing = IntPacking::kAwq;
  s.logical_shape = {R, C};
  s.group_cols = g;
  s.codes = i32_tensor({C, R / 8}, qweight);
  s.scale = f32_tensor({k.G, R}, scales);
  s.zero_point = i32_tensor({k.G, R / 8}, qzeros);
  s.what = "w";
  auto [codes, q] = convert_int_weight(s);
  Codes k3 = k;
  k3.M = 1;
  WeightQuantization q3 = q;
  q3.logical_shape = {1, R, C};
  expect_dequantizes_to(codes.reshape({1, R, (C + 1) / 2}), q3, k3, true);
}

}  // namespace
}  // namespace mg
