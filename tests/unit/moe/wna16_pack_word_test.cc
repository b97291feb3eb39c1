// The WNA16 device repacking's word, pair and FP4 scale-byte functions
// (ops/moe/cuda/wna16/wna16_pack_word.h), run on the host here, against the layout's inverse as
// wna16_unpack_host reads it: every code lands where the kernels look for it, padded rows and
// columns hold 0.
#include "ops/moe/cuda/wna16/wna16_pack_word.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
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

// The FP4 scale bytes [E, row_blocks, k_steps, 8, U]: byte (row, step, j) is the code of the
// scale of unit j (MXFP4: E8M0) or of half j of unit j / 2 (NVFP4: E4M3 over the part's global);
// padded rows and columns past K hold 0; a scale with no code clears `exact`.
TEST(Wna16PackWord, Fp4ScaleBytesAreEachUnitsOrHalfsCode) {
  // K 200: two steps, the second past K after 72 columns; gated, 6 rows a part (padded to 8).
  const int64_t E = 2, N = 12, K = 200, parts = 2, part_rows = 8, k_steps = 2;
  for (const Wna16Codes codes : {Wna16Codes::kMxfp4, Wna16Codes::kNvfp4}) {
    const bool mx = codes == Wna16Codes::kMxfp4;
    SCOPED_TRACE(mx ? "mxfp4" : "nvfp4");
    const int64_t group = mx ? 32 : 16, G = (K + group - 1) / group, U = mx ? 4 : 8;
    const std::vector<float> globals = {0.75f, 3.0f, 0.1f, 1.0f};  // [E, parts]
    std::vector<float> scales(E * N * G);
    std::vector<uint32_t> want_code(scales.size());
    for (size_t i = 0; i < scales.size(); ++i) {
      const int64_t e = static_cast<int64_t>(i) / (N * G), n = static_cast<int64_t>(i) / G % N;
      if (mx) {
        want_code[i] = 100 + i % 50;  // 2^-27 .. 2^22
        scales[i] = std::ldexp(1.0f, static_cast<int>(want_code[i]) - 127);
      } else {
        want_code[i] = 1 + i % 0x7E;  // every code but 0, subnormals included
        scales[i] = e4m3_scale_value(want_code[i]) * globals[e * parts + n / (N / parts)];
      }
    }
    Wna16ScaleByteSource s;
    s.scales = scales.data();
    s.globals = mx ? nullptr : globals.data();
    s.codes = codes;
    s.scale_groups = G;
    s.group_size = group;
    s.experts = E;
    s.rows = N;
    s.cols = K;
    s.parts = parts;
    s.part_rows = part_rows;
    s.k_steps = k_steps;
    const int64_t count = E * parts * part_rows * k_steps * U;
    EXPECT_EQ(count, E * parts * part_rows * k_steps * wna16_scale_bytes_per_step(codes));
    int64_t checked = 0;
    for (int64_t i = 0; i < count; ++i) {
      bool exact = false;
      const uint32_t got = wna16_scale_byte(s, i, &exact);
      EXPECT_TRUE(exact) << i;
      const int64_t j = i % U, g = i / U % 8, step = i / U / 8 % k_steps;
      const int64_t pr = i / U / 8 / k_steps % (parts * part_rows / 8) * 8 + g;
      const int64_t e = i / U / 8 / k_steps / (parts * part_rows / 8);
      const int64_t col = step * 128 + (mx ? 32 * j : 32 * (j / 2) + 16 * (j % 2));
      const int64_t in_part = pr % part_rows;
      if (in_part >= N / parts || col >= K) {
        EXPECT_EQ(got, 0u) << i;
        continue;
      }
      const int64_t n = pr / part_rows * (N / parts) + in_part;
      EXPECT_EQ(got, want_code[(e * N + n) * G + col / group]) << i;
      ++checked;
    }
    EXPECT_EQ(checked, E * N * (mx ? 7 : 13));  // 200 columns: 7 units, 13 halves
    // A scale with no code: MXFP4 not a power of two; NVFP4 0.6 x its global (E4M3 has 0.5625
    // and 0.625), the byte at (expert 0, row 0, step 0, j 1).
    std::vector<float> bad = scales;
    bad[1] = mx ? 0.75f : 0.6f * globals[0];
    s.scales = bad.data();
    bool exact = true;
    wna16_scale_byte(s, 1, &exact);
    EXPECT_FALSE(exact);
  }
}

}  // namespace
}  // namespace mg::cuda
