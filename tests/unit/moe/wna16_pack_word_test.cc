// The WNA16 device repacking's word and pair functions (ops/moe/cuda/wna16/wna16_pack_word.h),
// run on the host here, against the layout's inverse as wna16_unpack_host reads it: every code
// lands where the kernels look for it, padded rows and columns hold 0.
#include "ops/moe/cuda/wna16/wna16_pack_word.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

namespace mg::cuda {
namespace {

struct Layout {
  int bits;
  int64_t E, N, K, parts;
  int64_t part_rows() const { return (N / parts + 7) / 8 * 8; }
  int64_t k_steps() const { return (K + 127) / 128; }
  int64_t words() const {
    return E * parts * part_rows() / 8 * k_steps() * 32 * (bits == 4 ? 4 : 8);
  }
};

// The code at column k of padded row pr of expert e, read back as wna16_unpack_host does.
uint32_t read_back(const std::vector<uint32_t>& words, const Layout& l, int64_t e, int64_t pr,
                   int64_t k) {
  const int64_t W = l.bits == 4 ? 4 : 8, rows_padded = l.parts * l.part_rows();
  const int64_t block = pr / 8, g = pr % 8;
  const int64_t step = k / 128, in = k % 128, unit = in / 32, half = (in % 32) / 16;
  const int64_t r = in % 16, t = (r % 8) / 2, j = (r >= 8 ? 2 : 0) + r % 2;
  const int64_t w = l.bits == 4 ? unit : 2 * unit + half;
  const int64_t shift = l.bits == 4 ? 4 * (4 * half + j) : 8 * j;
  const uint32_t word = words[((e * (rows_padded / 8) + block) * l.k_steps() + step) * 32 * W +
                              (w / 4) * 128 + (4 * g + t) * 4 + w % 4];
  return (word >> shift) & ((1u << l.bits) - 1u);
}

void check_words(const Layout& l, uint32_t flip) {
  SCOPED_TRACE(::testing::Message() << l.bits << " bits, " << l.parts << " parts, K " << l.K);
  const int64_t row_bytes = l.bits == 4 ? (l.K + 1) / 2 : l.K;
  std::vector<uint8_t> codes(static_cast<size_t>(l.E * l.N * row_bytes));
  std::mt19937 rng(7);
  for (uint8_t& c : codes) c = static_cast<uint8_t>(rng());
  Wna16PackSource s;
  s.codes = codes.data();
  s.row_bytes = row_bytes;
  s.flip = flip;
  s.bits = l.bits;
  s.experts = l.E;
  s.rows = l.N;
  s.cols = l.K;
  s.parts = l.parts;
  s.part_rows = l.part_rows();
  s.k_steps = l.k_steps();
  std::vector<uint32_t> words(static_cast<size_t>(l.words()));
  for (int64_t i = 0; i < l.words(); ++i) words[i] = wna16_packed_word(s, i);
  const int64_t rows_per_part = l.N / l.parts;
  int mismatches = 0;
  for (int64_t e = 0; e < l.E; ++e) {
    for (int64_t pr = 0; pr < l.parts * l.part_rows(); ++pr) {
      const int64_t part = pr / l.part_rows(), in_part = pr % l.part_rows();
      const bool padded = in_part >= rows_per_part;
      const int64_t n = part * rows_per_part + in_part;
      for (int64_t k = 0; k < l.k_steps() * 128; ++k) {
        uint32_t want = 0;
        if (!padded && k < l.K) {
          const uint8_t* row = codes.data() + (e * l.N + n) * row_bytes;
          want = (l.bits == 4 ? ((k & 1) ? row[k / 2] >> 4 : row[k / 2] & 0xF) : row[k]) ^ flip;
        }
        if (read_back(words, l, e, pr, k) != want && ++mismatches <= 5) {
          ADD_FAILURE() << "expert " << e << " padded row " << pr << " column " << k << ": "
                        << read_back(words, l, e, pr, k) << ", want " << want;
        }
      }
    }
  }
  EXPECT_EQ(mismatches, 0);
}

TEST(Wna16PackWord, EveryCodeLandsWhereTheKernelsReadIt) {
  check_words({4, 2, 42, 200, 2}, 8);     // signed INT4, gated, padded rows, partial K step
  check_words({4, 3, 16, 256, 1}, 0);     // unsigned / FP4 codes
  check_words({8, 2, 42, 200, 2}, 0x80);  // signed INT8
  check_words({8, 1, 9, 96, 1}, 0);
}

TEST(Wna16PackWord, IntegerPairsAreScaleAndMinusZeroTimesScale) {
  const int64_t E = 2, N = 10, G = 3, parts = 2, part_rows = 8;
  std::vector<float> scales(E * N * G), zeros(E * N * G);
  for (size_t i = 0; i < scales.size(); ++i) {
    scales[i] = 0.01f * static_cast<float>(i + 1);
    zeros[i] = static_cast<float>(i % 16);
  }
  Wna16ParamSource p;
  p.scales = scales.data();
  p.scale_groups = G;
  p.groups = G;
  p.experts = E;
  p.rows = N;
  p.parts = parts;
  p.part_rows = part_rows;
  for (const float* z :
       {static_cast<const float*>(nullptr), static_cast<const float*>(zeros.data())}) {
    p.zeros = z;
    for (int64_t e = 0; e < E; ++e) {
      for (int64_t pr = 0; pr < parts * part_rows; ++pr) {
        for (int64_t g = 0; g < G; ++g) {
          float got[2];
          wna16_param_pair(p, (e * parts * part_rows + pr) * G + g, got);
          const int64_t in_part = pr % part_rows;
          if (in_part >= N / parts) {
            EXPECT_EQ(got[0], 0.0f);
            EXPECT_EQ(got[1], 0.0f);
            continue;
          }
          const int64_t at = (e * N + pr / part_rows * (N / parts) + in_part) * G + g;
          const float zero = z == nullptr ? 8.0f : zeros[at];
          EXPECT_EQ(got[0], scales[at]);
          EXPECT_EQ(got[1], -zero * scales[at]);
        }
      }
    }
  }
}

TEST(Wna16PackWord, E2m1PairsAreTheHalvedScalesOfEachK16Half) {
  // K 80: three 32-wide units, the last one half past K; NVFP4's scale per 16 columns.
  const int64_t E = 1, N = 8, K = 80, group = 16, G = K / group, units = 3;
  std::vector<float> scales(E * N * G);
  for (size_t i = 0; i < scales.size(); ++i) scales[i] = static_cast<float>(i + 1);
  Wna16ParamSource p;
  p.scales = scales.data();
  p.e2m1 = true;
  p.scale_groups = G;
  p.group_size = group;
  p.groups = units;
  p.experts = E;
  p.rows = N;
  p.part_rows = 8;
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t u = 0; u < units; ++u) {
      float got[2];
      wna16_param_pair(p, n * units + u, got);
      EXPECT_EQ(got[0], 0.5f * scales[n * G + std::min<int64_t>(2 * u, G - 1)]);
      EXPECT_EQ(got[1], 0.5f * scales[n * G + std::min<int64_t>(2 * u + 1, G - 1)]);
    }
  }
}

}  // namespace
}  // namespace mg::cuda
