// The WNA16 kernels' weight layout (wna16_experts_cuda.h, section 1): codes, scales and zero
// points of the input contract repacked once, on the host. Plain C++; in the CUDA build only
// because its header names CUDA types.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <thread>

#include "framework/core/error.h"
#include "framework/core/fp4.h"
#include "framework/core/fp4_scale_bytes.h"
#include "framework/core/thread_pool.h"
#include "ops/moe/cuda/wna16/wna16_exact_codes.h"
#include "ops/moe/cuda/wna16/wna16_experts_cuda.h"
#include "ops/moe/cuda/wna16/wna16_pack_word.h"

namespace mg::cuda {

namespace {

// Writes the codes of padded row `pr` of expert `e` into p.words (sized) through the layout;
// code_of(k) is the code of column k < K (columns past K get code 0).
template <class CodeOf>
void place_row_codes(Wna16PackedHost& p, int64_t e, int64_t pr, CodeOf code_of) {
  const int64_t row_blocks = p.parts * p.part_rows / 8;
  const int64_t words_per_lane = p.bits == 4 ? 4 : 8;
  const int64_t step_words = 32 * words_per_lane;
  // K offsets of the 4 values of lane t's B fragment within a k16 half.
  constexpr int frag_k[4] = {0, 1, 8, 9};
  const int64_t block = pr / 8;
  const int g = static_cast<int>(pr % 8);
  for (int64_t step = 0; step < p.k_steps; ++step) {
    uint32_t* base = p.words.data() + ((e * row_blocks + block) * p.k_steps + step) * step_words;
    for (int t = 0; t < 4; ++t) {
      const int lane = 4 * g + t;
      for (int w = 0; w < words_per_lane; ++w) {
        // Word w of the lane: 4 bits: unit w, halves 0 and 1; 8 bits: unit w / 2, half w % 2.
        uint32_t word = 0;
        const int values = p.bits == 4 ? 8 : 4;
        for (int j = 0; j < values; ++j) {
          const int unit = p.bits == 4 ? w : w / 2;
          const int half = p.bits == 4 ? j / 4 : w % 2;
          const int64_t k = step * kWna16KStep + 32 * unit + 16 * half + 2 * t + frag_k[j % 4];
          const uint32_t code = k < p.cols ? code_of(k) : 0u;
          word |= code << (j * p.bits);
        }
        base[(w / 4) * 128 + lane * 4 + (w % 4)] = word;
      }
    }
  }
}

// Runs pack_rows(begin, end) over [0, rows) on the host's threads (one per 4 M codes of `codes`
// at most).
void run_rows_on_host(int64_t rows, int64_t codes, FunctionRef<void(int64_t, int64_t)> pack_rows) {
  const int64_t threads =
      std::min<int64_t>({static_cast<int64_t>(std::max(1u, std::thread::hardware_concurrency())),
                         max_threads(), std::max<int64_t>(1, codes / (int64_t{1} << 22))});
  if (threads <= 1) {
    pack_rows(0, rows);
  } else {
    ThreadPool pool(static_cast<int>(threads));
    pool.parallel_for(rows, pack_rows, 64);
  }
}

}  // namespace

std::string wna16_pack_check(int bits, int64_t rows, int64_t cols, int64_t group_size,
                             int64_t parts) {
  if (bits != 4 && bits != 8) {
    return "WNA16 weights have 4 or 8 bits, not " + std::to_string(bits);
  }
  if (rows <= 0 || cols <= 0) {
    return "WNA16 weight rows " + std::to_string(rows) + " and columns " + std::to_string(cols) +
           " must be positive";
  }
  if (parts != 1 && parts != 2) return "WNA16 weights pack 1 or 2 row parts";
  if (rows % parts != 0) {
    return "gated WNA16 weight rows " + std::to_string(rows) + " must split in two equal halves";
  }
  if (group_size == 0 || group_size < -1) {
    return "WNA16 group size " + std::to_string(group_size) + " must be positive or -1";
  }
  if (wna16_groups(cols, group_size) == 1) return "";
  if (group_size % 32 != 0) {
    return "WNA16 group size " + std::to_string(group_size) +
           " must be a multiple of 32 (or channel-wise): the kernels read scales per 32 columns";
  }
  if (cols % group_size != 0) {
    return "WNA16 weight columns " + std::to_string(cols) +
           " must be a multiple of the group size " + std::to_string(group_size) +
           " (a partial last group is not supported)";
  }
  return "";
}

Wna16PackedHost wna16_layout(int64_t experts, int64_t rows, int64_t cols, int bits,
                             int64_t group_size, int64_t parts) {
  const std::string why = wna16_pack_check(bits, rows, cols, group_size, parts);
  MG_CHECK(why.empty(), "WNA16 layout: {}", why);
  Wna16PackedHost p;
  p.bits = bits;
  p.experts = experts;
  p.parts = parts;
  p.part_rows = (rows / parts + 7) / 8 * 8;
  p.cols = cols;
  p.k_steps = (cols + kWna16KStep - 1) / kWna16KStep;
  p.groups = wna16_groups(cols, group_size);
  p.group_size = p.groups == 1 ? cols : group_size;
  return p;
}

Wna16Zeros wna16_zero_kind(const float* scales, const float* zeros_f32, const uint8_t* zeros_u8,
                           int64_t count, int bits) {
  const int max_code = (1 << bits) - 1;
  const float sym_zero = bits == 4 ? 8.0f : 128.0f;
  for (int64_t i = 0; i < count; ++i) {
    float z = sym_zero;
    if (zeros_f32 != nullptr) z = zeros_f32[i];
    if (zeros_u8 != nullptr) z = zeros_u8[i];
    if (!(z >= 0.0f && z <= static_cast<float>(max_code) && z == std::nearbyint(z))) {
      return Wna16Zeros::kReal;
    }
    const float s = scales[i];
    if (s == 0.0f) continue;
    const float mag = std::fabs(s);
    if (!(mag >= 0x1p-100f && mag <= 0x1p100f)) return Wna16Zeros::kReal;
  }
  return Wna16Zeros::kIntegerCodes;
}

Wna16PackedHost wna16_pack(const Wna16HostMatrix& m, int64_t parts) {
  const std::string why = wna16_pack_check(m.bits, m.rows, m.cols, m.group_size, parts);
  MG_CHECK(why.empty(), "WNA16 pack: {}", why);
  MG_CHECK(m.codes != nullptr && m.scales != nullptr, "WNA16 pack: codes and scales must be set");
  MG_CHECK(m.zeros_f32 == nullptr || m.zeros_u8 == nullptr,
           "WNA16 pack: zero points as F32 or uint8, not both");
  const int64_t E = m.experts, N = m.rows, K = m.cols;
  const int64_t rows_per_part = N / parts;
  const int max_code = (1 << m.bits) - 1;
  const float sym_zero = m.bits == 4 ? 8.0f : 128.0f;

  Wna16PackedHost p = wna16_layout(E, N, K, m.bits, m.group_size, parts);
  const int64_t rows_padded = parts * p.part_rows;
  p.words.assign(static_cast<size_t>(p.word_count()), 0u);
  p.params.assign(static_cast<size_t>(p.param_count()), 0.0f);

  // The padded row of canonical row n: its part's rows start at part * part_rows.
  const auto padded_row = [&](int64_t n) {
    return n / rows_per_part * p.part_rows + n % rows_per_part;
  };

  // Rows are independent (each writes its own words and pairs): a Qwen3-30B-A3B layer has 600 M
  // codes, so the host threads share them. An out-of-range code or zero point is noted (the
  // first by position) and reported once the workers are done.
  std::atomic<int64_t> bad_code{E * N * K}, bad_zero{E * N * p.groups};
  const auto lower_to = [](std::atomic<int64_t>& at, int64_t v) {
    int64_t cur = at.load();
    while (v < cur && !at.compare_exchange_weak(cur, v)) {
    }
  };
  const auto pack_rows = [&](int64_t begin, int64_t end) {
    for (int64_t en = begin; en < end; ++en) {
      const int64_t e = en / N, n = en % N;
      const int64_t pr = padded_row(n);
      const uint8_t* row = m.codes + (e * N + n) * K;
      for (int64_t k = 0; k < K; ++k) {
        if (row[k] > max_code) {
          lower_to(bad_code, (e * N + n) * K + k);
          break;
        }
      }
      for (int64_t g = 0; g < p.groups; ++g) {
        const int64_t at = (e * N + n) * p.groups + g;
        float z = sym_zero;
        if (m.zeros_f32 != nullptr) z = m.zeros_f32[at];
        if (m.zeros_u8 != nullptr) {
          if (m.zeros_u8[at] > max_code) lower_to(bad_zero, at);
          z = m.zeros_u8[at];
        }
        const float s = m.scales[at];
        float* out = p.params.data() + ((e * rows_padded + pr) * p.groups + g) * 2;
        out[0] = s;
        out[1] = -z * s;
      }
      place_row_codes(p, e, pr, [&](int64_t k) { return static_cast<uint32_t>(row[k]); });
    }
  };
  run_rows_on_host(E * N, E * N * K, pack_rows);
  if (const int64_t at = bad_code.load(); at < E * N * K) {
    MG_FAIL("WNA16 pack: code {} at expert {} row {} column {} exceeds {} bits", m.codes[at],
            at / (N * K), at / K % N, at % K, m.bits);
  }
  if (const int64_t at = bad_zero.load(); at < E * N * p.groups) {
    MG_FAIL("WNA16 pack: zero point {} at expert {} row {} exceeds {} bits", m.zeros_u8[at],
            at / (N * p.groups), at / p.groups % N, m.bits);
  }
  p.zeros = wna16_zero_kind(m.scales, m.zeros_f32, m.zeros_u8, E * N * p.groups, m.bits);
  return p;
}

std::string wna16_pack_e2m1_check(Wna16Codes codes, int64_t rows, int64_t cols, int64_t group_size,
                                  int64_t parts) {
  if (codes != Wna16Codes::kMxfp4 && codes != Wna16Codes::kNvfp4) {
    return "FP4 weights are packed as MXFP4 or NVFP4 codes";
  }
  if (rows <= 0 || cols <= 0 || cols % 2 != 0) {
    return "FP4 weight rows " + std::to_string(rows) + " and columns " + std::to_string(cols) +
           " must be positive, the columns even (two codes per byte)";
  }
  if (parts != 1 && parts != 2) return "FP4 weights pack 1 or 2 row parts";
  if (rows % parts != 0) {
    return "gated FP4 weight rows " + std::to_string(rows) + " must split in two equal halves";
  }
  const int64_t unit = codes == Wna16Codes::kMxfp4 ? 32 : 16;
  if (group_size <= 0 || group_size % unit != 0) {
    return "FP4 scale groups of " + std::to_string(group_size) + " columns: the kernels take " +
           (codes == Wna16Codes::kMxfp4 ? "an E8M0 scale byte per 32 columns (MXFP4)"
                                        : "an E4M3 scale byte per 16 columns (NVFP4)") +
           ", so groups must be multiples of " + std::to_string(unit);
  }
  return "";
}

Wna16PackedHost wna16_layout_e2m1(Wna16Codes codes, int64_t experts, int64_t rows, int64_t cols,
                                  int64_t parts) {
  const std::string why =
      wna16_pack_e2m1_check(codes, rows, cols, codes == Wna16Codes::kMxfp4 ? 32 : 16, parts);
  MG_CHECK(why.empty(), "WNA16 E2M1 layout: {}", why);
  Wna16PackedHost p;
  p.bits = 4;
  p.codes = codes;
  p.experts = experts;
  p.parts = parts;
  p.part_rows = (rows / parts + 7) / 8 * 8;
  p.cols = cols;
  p.k_steps = (cols + kWna16KStep - 1) / kWna16KStep;
  p.groups = (cols + 31) / 32;  // 32-wide units (the scale bytes are per step: scale_byte_count)
  p.group_size = 32;
  return p;
}

Wna16PackedHost wna16_pack_e2m1(Wna16Codes codes, const uint8_t* packed, const float* scales,
                                const float* globals, int64_t experts, int64_t rows, int64_t cols,
                                int64_t group_size, int64_t parts) {
  const std::string why = wna16_pack_e2m1_check(codes, rows, cols, group_size, parts);
  MG_CHECK(why.empty(), "WNA16 E2M1 pack: {}", why);
  MG_CHECK(packed != nullptr && scales != nullptr, "WNA16 E2M1 pack: codes and scales must be set");
  const int64_t E = experts, N = rows, K = cols, Kb = K / 2;
  const int64_t rows_per_part = N / parts, groups = (K + group_size - 1) / group_size;
  Wna16PackedHost p = wna16_layout_e2m1(codes, E, N, K, parts);
  p.words.assign(static_cast<size_t>(p.word_count()), 0u);
  p.scale_bytes.assign(static_cast<size_t>(p.scale_byte_count()), 0u);
  if (codes == Wna16Codes::kNvfp4) {
    p.globals.assign(static_cast<size_t>(p.global_count()), 1.0f);
    if (globals != nullptr) std::copy_n(globals, p.global_count(), p.globals.begin());
    for (int64_t i = 0; i < p.global_count(); ++i) {
      MG_CHECK(std::isfinite(p.globals[i]) && p.globals[i] > 0.0f,
               "WNA16 E2M1 pack: NVFP4 global scale {} of expert {} part {} must be positive and "
               "finite",
               p.globals[i], i / parts, i % parts);
    }
  }
  // Rows are independent (each writes its own words): a GPT-OSS-120B layer has 3.2 G codes, so
  // the host threads share them.
  const auto pack_rows = [&](int64_t begin, int64_t end) {
    for (int64_t en = begin; en < end; ++en) {
      const int64_t e = en / N, n = en % N;
      const int64_t pr = n / rows_per_part * p.part_rows + n % rows_per_part;
      const uint8_t* row = packed + (e * N + n) * Kb;
      place_row_codes(p, e, pr, [&](int64_t k) {
        const uint8_t byte = row[k >> 1];
        return static_cast<uint32_t>((k & 1) ? byte >> 4 : byte & 0xF);
      });
    }
  };
  run_rows_on_host(E * N, E * N * K, pack_rows);
  // The scale bytes, as the device repacking writes them (wna16_scale_byte); the first scale with
  // no byte is reported by position.
  Wna16ScaleByteSource src;
  src.scales = scales;
  src.globals = codes == Wna16Codes::kNvfp4 ? p.globals.data() : nullptr;
  src.codes = codes;
  src.scale_groups = groups;
  src.group_size = group_size;
  src.experts = E;
  src.rows = N;
  src.cols = K;
  src.parts = parts;
  src.part_rows = p.part_rows;
  src.k_steps = p.k_steps;
  const int64_t count = p.scale_byte_count();
  int64_t first_bad = count;
  for (int64_t i = 0; i < count && first_bad == count; ++i) {
    bool exact = true;
    p.scale_bytes[static_cast<size_t>(i)] = static_cast<uint8_t>(wna16_scale_byte(src, i, &exact));
    if (!exact) first_bad = i;
  }
  // Back from a byte's place to the scale it encodes.
  struct Place {
    int64_t e, n, group, part;
    float v;
  };
  const auto place_of = [&](int64_t i) {
    const int64_t U = wna16_scale_bytes_per_step(codes), j = i % U;
    const int64_t g = i / U % 8, step = i / U / 8 % p.k_steps;
    const int64_t row_blocks = parts * p.part_rows / 8;
    const int64_t pr = i / U / 8 / p.k_steps % row_blocks * 8 + g;
    const int64_t e = i / U / 8 / p.k_steps / row_blocks;
    const int64_t part = pr / p.part_rows, n = part * rows_per_part + pr % p.part_rows;
    const int64_t col =
        step * 128 + (codes == Wna16Codes::kMxfp4 ? 32 * j : 32 * (j / 2) + 16 * (j % 2));
    const int64_t group = col / group_size;
    return Place{e, n, group, part, scales[(e * N + n) * groups + group]};
  };
  if (first_bad < count) {
    const Place at = place_of(first_bad);
    if (codes == Wna16Codes::kMxfp4) {
      MG_FAIL(
          "WNA16 E2M1 pack: MXFP4 scale {} of expert {} row {} group {} is not a power of two in "
          "2^-127 .. 2^127 (an E8M0 code)",
          at.v, at.e, at.n, at.group);
    }
    MG_FAIL(
        "WNA16 E2M1 pack: NVFP4 scale {} of expert {} row {} group {} is not an E4M3 value times "
        "its global scale {}",
        at.v, at.e, at.n, at.group, p.globals[static_cast<size_t>(at.e * parts + at.part)]);
  }
  if (codes == Wna16Codes::kMxfp4) {
    // The kernels' shift (Wna16Weights::e8m0_shift) from the largest code (padding bytes are 0).
    const auto largest = std::max_element(p.scale_bytes.begin(), p.scale_bytes.end());
    if (largest != p.scale_bytes.end()) {
      if (*largest > wna16_exact::kE8m0MaxFoldedCode) {
        const Place at = place_of(largest - p.scale_bytes.begin());
        MG_FAIL(
            "WNA16 E2M1 pack: MXFP4 scale {} of expert {} row {} group {} is above 2^{}, the "
            "largest the kernels take",
            at.v, at.e, at.n, at.group, wna16_exact::kE8m0MaxFoldedExponent);
      }
      p.e8m0_shift = wna16_exact::e8m0_shift_of(*largest);
    }
  }
  return p;
}

std::vector<float> wna16_unpack_host(const Wna16PackedHost& p, int64_t rows) {
  MG_CHECK(static_cast<int64_t>(p.words.size()) == p.word_count() &&
               static_cast<int64_t>(p.params.size()) == p.param_count() &&
               static_cast<int64_t>(p.scale_bytes.size()) == p.scale_byte_count() &&
               static_cast<int64_t>(p.globals.size()) == p.global_count() && rows % p.parts == 0 &&
               rows / p.parts <= p.part_rows,
           "WNA16 unpack: {} words, {} params, {} scale bytes, {} globals and {} rows do not fit "
           "the layout",
           p.words.size(), p.params.size(), p.scale_bytes.size(), p.globals.size(), rows);
  const int64_t E = p.experts, K = p.cols, rows_per_part = rows / p.parts;
  const int64_t rows_padded = p.parts * p.part_rows, W = p.bits == 4 ? 4 : 8;
  std::vector<float> out(static_cast<size_t>(E * rows * K));
  for (int64_t e = 0; e < E; ++e) {
    for (int64_t n = 0; n < rows; ++n) {
      const int64_t pr = n / rows_per_part * p.part_rows + n % rows_per_part;
      const int64_t block = pr / 8, g = pr % 8;
      for (int64_t k = 0; k < K; ++k) {
        // k = 128 step + 32 unit + 16 half + 2t + {0, 1, 8, 9}[j].
        const int64_t step = k / 128, in = k % 128, unit = in / 32, half = (in % 32) / 16;
        const int64_t r = in % 16, t = (r % 8) / 2, j = (r >= 8 ? 2 : 0) + r % 2;
        const int64_t w = p.bits == 4 ? unit : 2 * unit + half;
        const int64_t shift = p.bits == 4 ? 4 * (4 * half + j) : 8 * j;
        const uint32_t word =
            p.words[((e * (rows_padded / 8) + block) * p.k_steps + step) * 32 * W + (w / 4) * 128 +
                    (4 * g + t) * 4 + w % 4];
        const uint32_t code = (word >> shift) & ((1u << p.bits) - 1u);
        // The scale bytes of this row and step: [E, row_blocks, k_steps, 8, U].
        const int64_t U = wna16_scale_bytes_per_step(p.codes);
        const uint8_t* step_bytes =
            p.scale_bytes.data() +
            (((e * (rows_padded / 8) + block) * p.k_steps + step) * 8 + g) * U;
        float& w_out = out[(e * rows + n) * K + k];
        switch (p.codes) {
          case Wna16Codes::kInteger: {
            const float* sb =
                p.params.data() + ((e * rows_padded + pr) * p.groups + k / p.group_size) * 2;
            w_out = std::fma(static_cast<float>(code), sb[0], sb[1]);
            break;
          }
          case Wna16Codes::kMxfp4:
            w_out =
                fp4_e2m1_to_float(static_cast<uint8_t>(code)) * e8m0_scale_value(step_bytes[unit]);
            break;
          case Wna16Codes::kNvfp4:
            // As the CPU reads NVFP4: the code times its effective F32 scale e4m3 x global.
            w_out = fp4_e2m1_to_float(static_cast<uint8_t>(code)) *
                    (e4m3_scale_value(step_bytes[2 * unit + half]) *
                     p.globals[static_cast<size_t>(e * p.parts + pr / p.part_rows)]);
            break;
        }
      }
    }
  }
  return out;
}

Wna16HostMatrix Wna16HostCodes::view() const {
  Wna16HostMatrix m;
  m.codes = codes.data();
  m.scales = scales.data();
  m.zeros_f32 = zeros.empty() ? nullptr : zeros.data();
  m.experts = experts;
  m.rows = rows;
  m.cols = cols;
  m.bits = bits;
  m.group_size = group_size;
  return m;
}

Wna16HostCodes wna16_quantize_host(const float* w, int64_t experts, int64_t rows, int64_t cols,
                                   int bits, int64_t group_size, bool symmetric) {
  const std::string why = wna16_pack_check(bits, rows, cols, group_size, 1);
  MG_CHECK(why.empty(), "WNA16 quantize: {}", why);
  Wna16HostCodes q;
  q.experts = experts;
  q.rows = rows;
  q.cols = cols;
  q.bits = bits;
  q.group_size = group_size;
  const int64_t groups = wna16_groups(cols, group_size);
  const int64_t g_cols = groups == 1 ? cols : group_size;
  const int max_code = (1 << bits) - 1;
  q.codes.resize(static_cast<size_t>(experts * rows * cols));
  q.scales.resize(static_cast<size_t>(experts * rows * groups));
  if (!symmetric) q.zeros.resize(q.scales.size());
  for (int64_t r = 0; r < experts * rows; ++r) {
    for (int64_t g = 0; g < groups; ++g) {
      const float* v = w + r * cols + g * g_cols;
      float lo = 0.0f, hi = 0.0f, amax = 0.0f;
      for (int64_t c = 0; c < g_cols; ++c) {
        lo = std::min(lo, v[c]);
        hi = std::max(hi, v[c]);
        amax = std::max(amax, std::fabs(v[c]));
      }
      float s, z;
      if (symmetric) {
        z = static_cast<float>(1 << (bits - 1));
        s = amax / static_cast<float>((1 << (bits - 1)) - 1);
      } else {
        s = (hi - lo) / static_cast<float>(max_code);
        z = s > 0.0f ? std::clamp(std::nearbyint(-lo / s), 0.0f, static_cast<float>(max_code))
                     : 0.0f;
      }
      if (!(s > 0.0f)) s = 1.0f;
      q.scales[r * groups + g] = s;
      if (!symmetric) q.zeros[r * groups + g] = z;
      for (int64_t c = 0; c < g_cols; ++c) {
        const float code =
            std::clamp(std::nearbyint(v[c] / s) + z, 0.0f, static_cast<float>(max_code));
        q.codes[r * cols + g * g_cols + c] = static_cast<uint8_t>(code);
      }
    }
  }
  return q;
}

std::vector<float> wna16_dequantize_host(const Wna16HostMatrix& m) {
  const int64_t groups = wna16_groups(m.cols, m.group_size);
  const int64_t g_cols = groups == 1 ? m.cols : m.group_size;
  const float sym_zero = m.bits == 4 ? 8.0f : 128.0f;
  std::vector<float> out(static_cast<size_t>(m.experts * m.rows * m.cols));
  for (int64_t r = 0; r < m.experts * m.rows; ++r) {
    for (int64_t c = 0; c < m.cols; ++c) {
      const int64_t at = r * groups + c / g_cols;
      float z = sym_zero;
      if (m.zeros_f32 != nullptr) z = m.zeros_f32[at];
      if (m.zeros_u8 != nullptr) z = m.zeros_u8[at];
      out[r * m.cols + c] = (static_cast<float>(m.codes[r * m.cols + c]) - z) * m.scales[at];
    }
  }
  return out;
}

}  // namespace mg::cuda
