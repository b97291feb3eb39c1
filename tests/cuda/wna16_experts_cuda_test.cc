// The weight-only INT4 / INT8 (WNA16) expert kernels (ops/moe/cuda/wna16/wna16_experts_cuda.h)
// against an fp64 reference over the contract's real weights (q - z) * s rounded to the
// activation dtype, in BF16 and F16:
// - the packing (host only, runs without a GPU): every code lands where the layout comment says,
//   and unsupported inputs (K not a multiple of the group, 3 bits, codes past the bit width) are
//   refused with the reason;
// - the grouped GEMM, both kernels forced, 4 and 8 bits, groups of 32, 64, 128 columns and
//   channel-wise, symmetric, asymmetric with F32 and with uint8 zero points, every epilogue, odd N,
//   K not a multiple of 128, the row gather through row_to_pair, experts with 0, 1 and 300 rows;
// - the expert MLP (align -> GEMM1 + act -> GEMM2 -> combine) on 1, 8 and 300 tokens with
//   non-local experts, eager and replayed from a CUDA graph (which must agree bit for bit).
// Tolerances as the FP8 tests' (tests/cuda/fp8_experts_cuda_test.cc): the kernel sums exact
// products of T values in fp32 and rounds once, so an element may be off by ~half an ulp of T
// (2^-9 BF16, 2^-12 F16); bounds 2^-8 |ref| (F16 2^-10) + 2^-10 rms, normalised L2 4e-3 (F16 1e-3).
// The MLP's bounds are looser (h rounded to T) and add one ulp of each pair's rounded expert output
// (mlp_reference), which the combine keeps where the pairs cancel.
// A wrong nibble, a group's scale off by one group or a swapped gate/up moves results by tens of
// percent.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "tests/cuda/cuda_test_util.h"
#include "tests/cuda/moe_kernel_test_util.h"

#ifdef MG_WITH_CUDA
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include "ops/moe/cuda/moe_align_cuda.h"
#include "ops/moe/cuda/wna16/wna16_experts_cuda.h"
#include "ops/moe/experts/cuda_expert_common.h"
#include "ops/moe/experts/cuda_wna16_experts.h"
#include "ops/moe/heuristics/unquantized_kernel_choice.h"
#include "ops/moe/reference/moe_reference.h"
#include "tests/unit/moe/moe_test_util.h"
#endif

namespace mg {
namespace {

#ifdef MG_WITH_CUDA

using cuda::GroupedEpilogue;
using cuda::MoEActKind;
using cuda::MoEActParams;
using cuda::Wna16GemmKernel;
using testing::compare_bounded;
using testing::device_copy;
using testing::DeviceBuffer;
using testing::reference_activation;
using testing::run_eager_and_graph;

// ---- Host values ---------------------------------------------------------------------------

float to_f32(__half x) {
  return __half2float(x);
}
float to_f32(__nv_bfloat16 x) {
  return __bfloat162float(x);
}
template <typename T>
T from_f32(float x) {
  if constexpr (std::is_same_v<T, __half>) {
    return __float2half_rn(x);
  } else {
    return __float2bfloat16_rn(x);
  }
}
template <typename T>
float round_to(double x) {
  return to_f32(from_f32<T>(static_cast<float>(x)));
}
template <typename T>
const char* dtype_label() {
  return std::is_same_v<T, __half> ? "F16" : "BF16";
}
template <typename F>
void for_each_dtype(const F& f) {
  for (const testing::DtypeTolerance& d : testing::cuda_dtypes()) {
    if (d.dtype == DType::kBF16) f.template operator()<__nv_bfloat16>();
    if (d.dtype == DType::kF16) f.template operator()<__half>();
  }
}

template <typename T>
std::vector<float> random_activations(int64_t rows, int64_t k, float range, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-range, range);
  std::vector<float> x(rows * k);
  for (float& v : x) v = round_to<T>(u(rng));
  return x;
}

template <typename T>
std::vector<T> to_dtype(const std::vector<float>& x) {
  std::vector<T> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = from_f32<T>(x[i]);
  return out;
}

template <typename T>
struct Bounds {
  static constexpr double kRel = std::is_same_v<T, __half> ? 1.0 / 1024 : 1.0 / 256;
  static constexpr double kAbs = 1.0 / 1024;
  static constexpr double kL2 = std::is_same_v<T, __half> ? 1e-3 : 4e-3;
};

// ---- Quantized weights -----------------------------------------------------------------------

// kF32Real: the asymmetric zero points plus 0.25 (not integer codes: Wna16Zeros::kReal, so the
// kernels take the per-value path; every other kind takes the exact q - z path on the 16- and
// 32-row tiles, cuda::wna16_gemm_exact).
enum class Zeros { kSymmetric, kF32, kU8, kF32Real };

const char* zeros_label(Zeros z) {
  switch (z) {
    case Zeros::kSymmetric:
      return "sym";
    case Zeros::kF32:
      return "asym-f32";
    case Zeros::kU8:
      return "asym-u8";
    case Zeros::kF32Real:
      return "asym-f32-real";
  }
  return "?";
}

// One matrix [E, N, K]: its contract (made by wna16_quantize_host from random weights), the
// reference weights (q - z) * s rounded through T, and the packed copy on the device.
struct QuantMatrix {
  cuda::Wna16HostCodes codes;
  std::vector<uint8_t> zeros_u8;
  std::vector<float> zeros_real;  // Zeros::kF32Real
  std::vector<float> ref;         // [E, N, K] real weights rounded through T
  // [E, N, K] the packed layout read back on the host (wna16_unpack_host): fma(q, s, -z·s) or
  // e2m1 times its scale (and global), F32 before any rounding to T
  std::vector<float> unpacked;
  std::unique_ptr<DeviceBuffer> words, params;
  std::unique_ptr<DeviceBuffer> scale_bytes, globals;  // FP4 (make_fp4_matrix)
  cuda::Wna16Weights view;
};

// on_device false: the host arrays only (host-only tests; `words`, `params` and `view` unset).
template <typename T>
QuantMatrix make_matrix(int64_t experts, int64_t rows, int64_t cols, int bits, int64_t group,
                        Zeros zeros, int64_t parts, std::mt19937& rng, bool on_device = true) {
  std::uniform_real_distribution<float> value(-0.5f, 0.5f);
  std::vector<float> w(experts * rows * cols);
  for (float& v : w) v = value(rng);
  QuantMatrix m;
  m.codes = cuda::wna16_quantize_host(w.data(), experts, rows, cols, bits, group,
                                      zeros == Zeros::kSymmetric);
  cuda::Wna16HostMatrix view = m.codes.view();
  if (zeros == Zeros::kU8) {
    m.zeros_u8.resize(m.codes.zeros.size());
    for (size_t i = 0; i < m.zeros_u8.size(); ++i) {
      m.zeros_u8[i] = static_cast<uint8_t>(m.codes.zeros[i]);
    }
    view.zeros_f32 = nullptr;
    view.zeros_u8 = m.zeros_u8.data();
  }
  if (zeros == Zeros::kF32Real) {
    m.zeros_real = m.codes.zeros;
    for (float& z : m.zeros_real) z += 0.25f;
    view.zeros_f32 = m.zeros_real.data();
  }
  m.ref = cuda::wna16_dequantize_host(view);
  for (float& v : m.ref) v = round_to<T>(v);
  const cuda::Wna16PackedHost packed = cuda::wna16_pack(view, parts);
  m.unpacked = cuda::wna16_unpack_host(packed, rows);
  if (!on_device) return m;
  m.words = device_copy(packed.words);
  m.params = device_copy(packed.params);
  m.view = cuda::wna16_weights_view(packed, m.words->as<uint32_t>(), m.params->as<float>());
  return m;
}

// The E4M3 values random NVFP4 scales are drawn from (exact in E4M3), times their part's global.
constexpr float kE4m3Values[] = {0.5f, 0.625f, 0.75f, 1.0f, 1.25f, 1.5f};

// One FP4 E2M1 matrix [E, N, K] (K even) packed by wna16_pack_e2m1: uniform random codes (every
// nibble, both signs), MXFP4 scales 2^-3 or 2^-4 per 32 columns, NVFP4 scales E4M3 times a global
// of its own per (expert, part) (0.05, 0.1, 0.15, ...). `ref`: the layout read back on the host
// (wna16_unpack_host: e2m1 times its scale, times NVFP4's global) rounded through T.
template <typename T>
QuantMatrix make_fp4_matrix(cuda::Wna16Codes codes, int64_t experts, int64_t rows, int64_t cols,
                            int64_t group, int64_t parts, std::mt19937& rng,
                            bool on_device = true) {
  const bool nv = codes == cuda::Wna16Codes::kNvfp4;
  const int64_t groups = (cols + group - 1) / group;
  std::vector<uint8_t> packed(experts * rows * cols / 2);
  std::uniform_int_distribution<int> byte(0, 255), pick(0, 5);
  for (uint8_t& b : packed) b = static_cast<uint8_t>(byte(rng));
  std::vector<float> globals(experts * parts);
  for (size_t i = 0; i < globals.size(); ++i) globals[i] = 0.05f * static_cast<float>(1 + i % 4);
  std::vector<float> scales(experts * rows * groups);
  for (int64_t e = 0; e < experts; ++e) {
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t g = 0; g < groups; ++g) {
        const int v = pick(rng);
        scales[(e * rows + r) * groups + g] =
            nv ? kE4m3Values[v] * globals[e * parts + r / (rows / parts)]
               : std::ldexp(1.0f, v % 2 == 0 ? -3 : -4);
      }
    }
  }
  const cuda::Wna16PackedHost p =
      cuda::wna16_pack_e2m1(codes, packed.data(), scales.data(), nv ? globals.data() : nullptr,
                            experts, rows, cols, group, parts);
  QuantMatrix m;
  m.unpacked = cuda::wna16_unpack_host(p, rows);
  m.ref = m.unpacked;
  for (float& v : m.ref) v = round_to<T>(v);
  if (!on_device) return m;
  m.words = device_copy(p.words);
  m.scale_bytes = device_copy(p.scale_bytes);
  m.globals = device_copy(p.globals);
  m.view =
      cuda::wna16_weights_view(p, m.words->as<uint32_t>(), nullptr, m.scale_bytes->as<uint8_t>(),
                               nv ? m.globals->as<float>() : nullptr);
  return m;
}

const char* codes_label(cuda::Wna16Codes codes) {
  switch (codes) {
    case cuda::Wna16Codes::kInteger:
      return "int";
    case cuda::Wna16Codes::kMxfp4:
      return "mxfp4";
    case cuda::Wna16Codes::kNvfp4:
      return "nvfp4";
  }
  return "?";
}

double dot(const float* x, const float* w, int64_t k) {
  double s = 0.0;
  for (int64_t i = 0; i < k; ++i) s += static_cast<double>(x[i]) * w[i];
  return s;
}

// ---- 1. Packing (host) -----------------------------------------------------------------------

TEST(CudaWna16Experts, PackPutsEveryCodeWhereTheLayoutSays) {
  std::mt19937 rng(7);
  for (const int bits : {4, 8}) {
    for (const int64_t parts : {int64_t{1}, int64_t{2}}) {
      const int64_t E = 2, N = parts == 2 ? 2 * 13 : 21, K = 200;
      std::uniform_int_distribution<int> code(0, (1 << bits) - 1);
      std::vector<uint8_t> codes(E * N * K);
      for (uint8_t& c : codes) c = static_cast<uint8_t>(code(rng));
      std::vector<float> scales(E * N, 0.5f), zeros(E * N, 3.0f);
      cuda::Wna16HostMatrix m;
      m.codes = codes.data();
      m.scales = scales.data();
      m.zeros_f32 = zeros.data();
      m.experts = E;
      m.rows = N;
      m.cols = K;
      m.bits = bits;
      m.group_size = -1;
      const cuda::Wna16PackedHost p = cuda::wna16_pack(m, parts);
      ASSERT_EQ(p.part_rows, parts == 2 ? 16 : 24);
      ASSERT_EQ(static_cast<int64_t>(p.words.size()), p.word_count());
      ASSERT_EQ(static_cast<int64_t>(p.params.size()), p.param_count());
      const std::vector<float> unpacked = cuda::wna16_unpack_host(p, N);
      for (int64_t i = 0; i < E * N * K; ++i) {
        ASSERT_EQ(unpacked[i], (codes[i] - 3.0f) * 0.5f) << "element " << i;
      }
      ASSERT_EQ(p.k_steps, 2);
      const int64_t rows_padded = parts * p.part_rows, W = bits == 4 ? 4 : 8;
      for (int64_t e = 0; e < E; ++e) {
        for (int64_t n = 0; n < N; ++n) {
          const int64_t pr = n / (N / parts) * p.part_rows + n % (N / parts);
          const int64_t block = pr / 8, g = pr % 8;
          EXPECT_EQ(p.params[(e * rows_padded + pr) * 2], 0.5f);
          EXPECT_EQ(p.params[(e * rows_padded + pr) * 2 + 1], -1.5f);
          for (int64_t k = 0; k < K; ++k) {
            // k = 128 step + 32 unit + 16 half + r, r = 2t + {0, 1, 8, 9}[j].
            const int64_t step = k / 128, in = k % 128, unit = in / 32, half = (in % 32) / 16;
            const int64_t r = in % 16, t = (r % 8) / 2, j = (r >= 8 ? 2 : 0) + r % 2;
            const int64_t lane = 4 * g + t;
            const int64_t w = bits == 4 ? unit : 2 * unit + half;
            const int64_t shift = bits == 4 ? 4 * (4 * half + j) : 8 * j;
            const uint32_t word =
                p.words[((e * (rows_padded / 8) + block) * p.k_steps + step) * 32 * W +
                        (w / 4) * 128 + lane * 4 + w % 4];
            ASSERT_EQ((word >> shift) & ((1u << bits) - 1), codes[(e * N + n) * K + k])
                << bits << " bits, parts " << parts << ", e " << e << " n " << n << " k " << k;
          }
        }
      }
    }
  }
}

// The tile rule by rows an expert averages and code kind (choose_wna16_gemm_kernel cites the
// benchmark), at its edges, and which tiles take the exact integer path; host only.
TEST(CudaWna16Experts, GemmTileFollowsTheRowsAnExpertAveragesAndTheCodes) {
  using cuda::choose_wna16_gemm_kernel;
  using cuda::Wna16Codes;
  for (const Wna16Codes codes : {Wna16Codes::kInteger, Wna16Codes::kMxfp4, Wna16Codes::kNvfp4}) {
    const bool fp4 = codes != Wna16Codes::kInteger;
    EXPECT_EQ(choose_wna16_gemm_kernel(1, 128, codes), Wna16GemmKernel::kMma16);
    EXPECT_EQ(choose_wna16_gemm_kernel(16 * 128, 128, codes), Wna16GemmKernel::kMma16);
    EXPECT_EQ(choose_wna16_gemm_kernel(16 * 128 + 1, 128, codes),
              fp4 ? Wna16GemmKernel::kMma32 : Wna16GemmKernel::kMma64);
    EXPECT_EQ(choose_wna16_gemm_kernel(32 * 128, 128, codes),
              fp4 ? Wna16GemmKernel::kMma32 : Wna16GemmKernel::kMma64);
    EXPECT_EQ(choose_wna16_gemm_kernel(32 * 128 + 1, 128, codes), Wna16GemmKernel::kMma64);
    EXPECT_EQ(choose_wna16_gemm_kernel(16, 0, codes), Wna16GemmKernel::kMma16);  // E 0: as one
  }
  cuda::Wna16Weights w;
  w.codes = Wna16Codes::kInteger;
  w.zeros = cuda::Wna16Zeros::kIntegerCodes;
  EXPECT_TRUE(cuda::wna16_gemm_exact(w, Wna16GemmKernel::kMma16));
  EXPECT_TRUE(cuda::wna16_gemm_exact(w, Wna16GemmKernel::kMma32));
  EXPECT_FALSE(cuda::wna16_gemm_exact(w, Wna16GemmKernel::kMma64));
  w.zeros = cuda::Wna16Zeros::kReal;
  EXPECT_FALSE(cuda::wna16_gemm_exact(w, Wna16GemmKernel::kMma16));
  w.codes = Wna16Codes::kMxfp4;
  w.zeros = cuda::Wna16Zeros::kIntegerCodes;
  EXPECT_FALSE(cuda::wna16_gemm_exact(w, Wna16GemmKernel::kMma16));
}

// wna16_wgmma's rule (wna16_wgmma_chosen cites the runs): INT4 codes with integer zero points,
// groups of >= 128 columns or channel-wise, more than 16 and fewer than 128 rows an expert (the
// large-M path's threshold), the
// sm_90a kernels loaded; what wna16_wgmma_check refuses is never chosen.
TEST(CudaWna16Experts, WgmmaRuleFollowsRowsGroupsAndCodes) {
  const auto weights = [](int64_t rows, int64_t cols, int64_t group, int bits) {
    cuda::Wna16Weights w;
    w.codes = cuda::Wna16Codes::kInteger;
    w.zeros = cuda::Wna16Zeros::kIntegerCodes;
    w.bits = bits;
    w.part_rows = rows;
    w.k_steps = (cols + 127) / 128;
    w.groups = cuda::wna16_groups(cols, group);
    w.group_size = group < 0 ? cols : group;
    return w;
  };
  const int64_t E = 128, H = 2048, I = 768;
  const auto chosen = [&](int64_t rows_per_expert, const cuda::Wna16Weights& w13,
                          const cuda::Wna16Weights& w2, bool available = true) {
    return cuda::wna16_wgmma_chosen(rows_per_expert * E, E, w13, H, w2, I, available);
  };
  cuda::Wna16Weights w13 = weights(2 * I, H, 128, 4), w2 = weights(H, I, 128, 4);
  w13.parts = 2;
  w13.part_rows = I;
  EXPECT_FALSE(chosen(16, w13, w2));  // the 16-row tile
  EXPECT_TRUE(chosen(17, w13, w2));
  EXPECT_TRUE(chosen(127, w13, w2));
  EXPECT_FALSE(chosen(128, w13, w2));  // the large-M path
  EXPECT_FALSE(chosen(64, w13, w2, /*available=*/false));
  EXPECT_TRUE(chosen(64, weights(2 * I, H, -1, 4), weights(H, I, -1, 4)));  // channel-wise
  EXPECT_FALSE(chosen(64, weights(2 * I, H, 64, 4), w2));                   // groups of 64
  EXPECT_FALSE(chosen(64, w13, weights(H, I, 32, 4)));
  EXPECT_FALSE(chosen(64, weights(2 * I, H, 128, 8), w2));  // INT8
  cuda::Wna16Weights real = w2;
  real.zeros = cuda::Wna16Zeros::kReal;
  EXPECT_FALSE(chosen(64, w13, real));
  cuda::Wna16Weights fp4 = w2;
  fp4.codes = cuda::Wna16Codes::kMxfp4;
  EXPECT_FALSE(chosen(64, w13, fp4));
  EXPECT_NE(cuda::wna16_wgmma_check(w2, 32, 64 * E, E).find("K >= 64"), std::string::npos);
  EXPECT_NE(cuda::wna16_wgmma_check(w2, I, 15, E).find(">= 16 rows"), std::string::npos);
  EXPECT_NE(cuda::wna16_wgmma_check(weights(8, I, 128, 4), I, 64, 1).find("128 packed rows"),
            std::string::npos);
}

TEST(CudaWna16Experts, RefusesUnsupportedInputsWithTheReason) {
  EXPECT_NE(cuda::wna16_pack_check(4, 8, 192, 128, 1).find("multiple of the group size"),
            std::string::npos);
  EXPECT_NE(cuda::wna16_pack_check(3, 8, 256, 128, 1).find("4 or 8 bits"), std::string::npos);
  EXPECT_NE(cuda::wna16_pack_check(4, 8, 240, 48, 1).find("multiple of 32"), std::string::npos);
  EXPECT_NE(cuda::wna16_pack_check(4, 7, 256, 128, 2).find("two equal halves"), std::string::npos);
  EXPECT_EQ(cuda::wna16_pack_check(4, 7, 200, -1, 1), "");  // channel-wise: any K
  EXPECT_EQ(cuda::wna16_pack_check(8, 7, 96, 128, 1), "");  // one group covers all of K
  EXPECT_EQ(cuda::wna16_pack_check(4, 7, 192, 96, 1), "");  // 96 columns: 3 units per group
  std::vector<uint8_t> codes(8 * 32, 16);                   // 16 does not fit 4 bits
  std::vector<float> scales(8, 1.0f);
  cuda::Wna16HostMatrix m;
  m.codes = codes.data();
  m.scales = scales.data();
  m.experts = 1;
  m.rows = 8;
  m.cols = 32;
  m.bits = 4;
  m.group_size = -1;
  EXPECT_THROW(cuda::wna16_pack(m, 1), Error);
  m.bits = 8;
  EXPECT_NO_THROW(cuda::wna16_pack(m, 1));
  EXPECT_NE(cuda::wna16_gemm_check(16, 100).find("multiple of 8"), std::string::npos);
}

// ---- 2. Grouped GEMM -------------------------------------------------------------------------

struct GemmCase {
  std::vector<int32_t> rows_per_expert;
  int64_t first_row = 0, extra_rows = 0;
  int64_t n = 0, k = 0;
  int bits = 4;
  int64_t group = 128;
  Zeros zeros = Zeros::kSymmetric;
  GroupedEpilogue epilogue = GroupedEpilogue::kBias;
  MoEActKind kind = MoEActKind::kSiluGated;
  bool bias = false;
  bool gather = false;  // rows read through row_to_pair (top_k 2)
  bool gated() const { return epilogue == GroupedEpilogue::kActivation && cuda::is_gated(kind); }
  std::string describe() const {
    std::string rows;
    for (int32_t r : rows_per_expert) rows += std::to_string(r) + ",";
    return fmt::format(
        "rows [{}] first {} extra {} N {} K {} int{} group {} {} epilogue {} act {} bias {} "
        "gather {}",
        rows, first_row, extra_rows, n, k, bits, group, zeros_label(zeros),
        epilogue == GroupedEpilogue::kBias ? "bias" : "activation", static_cast<int>(kind), bias,
        gather);
  }
};

template <typename T>
void check_gemm(const GemmCase& c, Wna16GemmKernel kernel, uint32_t seed) {
  SCOPED_TRACE(fmt::format("{} {} {}", dtype_label<T>(), cuda::wna16_gemm_kernel_name(kernel),
                           c.describe()));
  std::mt19937 rng(seed);
  const int64_t experts = static_cast<int64_t>(c.rows_per_expert.size());
  const int64_t n_b = c.gated() ? 2 * c.n : c.n;
  std::vector<int32_t> offsets(experts + 1);
  offsets[0] = static_cast<int32_t>(c.first_row);
  for (int64_t e = 0; e < experts; ++e) offsets[e + 1] = offsets[e] + c.rows_per_expert[e];
  const int64_t max_rows = offsets[experts] + c.extra_rows;

  const QuantMatrix w =
      make_matrix<T>(experts, n_b, c.k, c.bits, c.group, c.zeros, c.gated() ? 2 : 1, rng);
  const int64_t top_k = 2, tokens = std::max<int64_t>(max_rows, 1);
  const std::vector<float> x = random_activations<T>(c.gather ? tokens : max_rows, c.k, 2.0f, rng);
  std::vector<int32_t> row_to_pair(std::max<int64_t>(max_rows, 1));
  std::uniform_int_distribution<int32_t> pair(0, static_cast<int32_t>(tokens * top_k - 1));
  for (int32_t& p : row_to_pair) p = pair(rng);
  std::uniform_real_distribution<float> bias_value(-0.5f, 0.5f);
  std::vector<float> bias(experts * n_b);
  for (float& b : bias) b = bias_value(rng);

  const std::unique_ptr<DeviceBuffer> d_x = device_copy(to_dtype<T>(x));
  auto d_r2p = device_copy(row_to_pair);
  auto d_bias = device_copy(bias);
  auto d_offsets = device_copy(offsets);
  DeviceBuffer d_c(max_rows * c.n * sizeof(T));
  MG_CUDA_CHECK(cudaMemset(d_c.as<void>(), 0xff, max_rows * c.n * sizeof(T)));

  cuda::Wna16GemmArgs args;
  args.a = d_x->as<void>();
  args.row_to_pair = c.gather ? d_r2p->as<int32_t>() : nullptr;
  args.top_k = top_k;
  args.b = w.view;
  args.bias = c.bias ? d_bias->as<float>() : nullptr;
  args.c = d_c.as<void>();
  args.expert_offsets = d_offsets->as<int32_t>();
  args.num_experts = experts;
  args.max_rows = max_rows;
  args.n = c.n;
  args.k = c.k;
  args.epilogue = c.epilogue;
  args.act.kind = c.kind;
  cuda::launch_wna16_grouped_gemm<T>(args, kernel, nullptr);
  MG_CUDA_CHECK(cudaDeviceSynchronize());

  std::vector<T> out(max_rows * c.n);
  d_c.download(out.data(), out.size() * sizeof(T));
  std::vector<uint16_t> out_bits(out.size());
  std::memcpy(out_bits.data(), out.data(), out.size() * sizeof(T));

  // The reference weights are what the kernel multiplies: on the exact path the unrounded
  // weights; on the per-value path its B operand, round_T(fma(q, s, -z·s)) (the layout read back,
  // rounded), not the contract's (q - z) · s rounded, which goes to the other neighbour of T when
  // the two F32 values straddle a rounding boundary: one ulp of a weight, past these bounds after
  // a cancelling sum (it did so once in ~10^5 weights). PackPutsEveryCodeWhereTheLayoutSays checks
  // the layout against the contract.
  std::vector<float> operand = w.unpacked;
  if (!cuda::wna16_gemm_exact(w.view, kernel)) {
    for (float& v : operand) v = round_to<T>(v);
  }
  std::vector<double> got, ref;
  bool untouched = true;
  for (int64_t row = 0; row < max_rows; ++row) {
    int64_t e = -1;
    for (int64_t i = 0; i < experts; ++i) {
      if (row >= offsets[i] && row < offsets[i + 1]) e = i;
    }
    if (e < 0) {
      for (int64_t col = 0; col < c.n; ++col) untouched &= out_bits[row * c.n + col] == 0xffff;
      continue;
    }
    const int64_t src = c.gather ? row_to_pair[row] / top_k : row;
    const float* xr = x.data() + src * c.k;
    for (int64_t col = 0; col < c.n; ++col) {
      double g = dot(xr, operand.data() + (e * n_b + col) * c.k, c.k);
      double u = c.gated() ? dot(xr, operand.data() + (e * n_b + c.n + col) * c.k, c.k) : 0.0;
      if (c.bias) {
        g += bias[e * n_b + col];
        if (c.gated()) u += bias[e * n_b + c.n + col];
      }
      MoEActParams act;
      act.kind = c.kind;
      ref.push_back(c.epilogue == GroupedEpilogue::kBias ? g : reference_activation(act, g, u));
      got.push_back(to_f32(out[row * c.n + col]));
    }
  }
  EXPECT_TRUE(untouched) << "a row outside the experts' rows was written";
  const std::string why =
      compare_bounded(got, ref, Bounds<T>::kRel, Bounds<T>::kAbs, Bounds<T>::kL2);
  EXPECT_TRUE(why.empty()) << why;
}

constexpr MoEActKind kGatedKinds[] = {MoEActKind::kSiluGated, MoEActKind::kGeluGated,
                                      MoEActKind::kGeluTanhGated, MoEActKind::kSwigluOai};
constexpr MoEActKind kPlainKinds[] = {MoEActKind::kReluSquared, MoEActKind::kSilu,
                                      MoEActKind::kGelu};

std::vector<GemmCase> gemm_cases() {
  const std::vector<std::vector<int32_t>> patterns = {
      {1, 0, 7, 33, 0},  // 5 experts: 1 row, none, 7, 33 (two 16-row tiles + 1), none
      {300, 0, 1},       // 3 experts: 300 rows (partial 16- and 64-row tiles), none, 1
      {0, 0, 0},         // no rows at all
  };
  // N odd and N past a 64-column tile; K below 128, not a multiple of 128, and long.
  const int64_t shapes[][2] = {{13, 384}, {40, 256}, {72, 200}, {136, 96}, {8, 1024}, {64, 512}};
  std::vector<GemmCase> cases;
  int index = 0;
  for (const int bits : {4, 8}) {
    // 256: a group spanning two K steps (the exact path's group sums cross a step).
    for (const int64_t group :
         {int64_t{32}, int64_t{64}, int64_t{128}, int64_t{256}, int64_t{-1}}) {
      for (const Zeros zeros : {Zeros::kSymmetric, Zeros::kF32, Zeros::kU8, Zeros::kF32Real}) {
        for (int epi = 0; epi < 3; ++epi) {  // plain bias, gated act, plain act
          for (int s = 0; s < 2; ++s) {
            GemmCase c;
            c.rows_per_expert = patterns[index % 7 == 6 ? 2 : (index + s) % 2];
            c.first_row = index % 4 == 1 ? 3 : 0;
            c.extra_rows = (index % 3) * 5;
            const auto& shape = shapes[(index * 2 + s) % 6];
            c.n = shape[0];
            c.k = shape[1];
            c.bits = bits;
            c.group = group;
            c.zeros = zeros;
            c.epilogue = epi == 0 ? GroupedEpilogue::kBias : GroupedEpilogue::kActivation;
            c.kind = epi == 1 ? kGatedKinds[index % 4] : kPlainKinds[index % 3];
            c.bias = index % 2 == 0;
            c.gather = index % 3 == 1;
            ++index;
            if (!cuda::wna16_pack_check(bits, c.gated() ? 2 * c.n : c.n, c.k, group, 1).empty()) {
              continue;  // K not a multiple of the group: refused (RefusesUnsupportedInputs...)
            }
            cases.push_back(c);
          }
        }
      }
    }
  }
  // Groups of 96 columns: 3 units a group, not a power of two, so the 16- and 32-row tiles find a
  // params copy's group by division rather than a shift (wna16_gemm.cuh's copy plans), and the
  // exact path ends a group inside a K step. Exact (kU8) and per-value (kF32Real) zero points,
  // gated and plain, with experts that get no rows.
  for (const int bits : {4, 8}) {
    for (const Zeros zeros : {Zeros::kU8, Zeros::kF32Real}) {
      for (const bool gated : {false, true}) {
        GemmCase c;
        c.rows_per_expert = {1, 0, 7, 33, 0};
        c.n = gated ? 40 : 72;
        c.k = 384;
        c.bits = bits;
        c.group = 96;
        c.zeros = zeros;
        c.epilogue = gated ? GroupedEpilogue::kActivation : GroupedEpilogue::kBias;
        c.kind = MoEActKind::kSiluGated;
        c.bias = true;
        c.gather = gated;
        cases.push_back(c);
      }
    }
  }
  return cases;
}

// The mma.sync tiles: every feature (gather, INT8, FP4, real zero points, any M) runs on them.
// wna16_wgmma takes a subset (wgmma_gemm_check) and has tests of its own below.
constexpr Wna16GemmKernel kMmaKernels[] = {Wna16GemmKernel::kMma16, Wna16GemmKernel::kMma32,
                                           Wna16GemmKernel::kMma64};

TEST(CudaWna16Experts, GroupedGemmEveryKernelMatchesReference) {
  MG_REQUIRE_GPU();
  uint32_t seed = 1000;
  const std::vector<GemmCase> cases = gemm_cases();
  ASSERT_GT(cases.size(), 80u);
  for (const GemmCase& c : cases) {
    for (const Wna16GemmKernel kernel : kMmaKernels) {
      for_each_dtype([&]<typename T>() { check_gemm<T>(c, kernel, ++seed); });
    }
  }
}

// ---- 3. Expert MLP: align -> GEMM1 + act -> GEMM2 -> combine -------------------------------

struct MlpCase {
  int64_t tokens = 1, top_k = 2, experts = 5, hidden = 256, inter = 128;
  int bits = 4;
  int64_t group = 128;
  Zeros zeros = Zeros::kSymmetric;
  MoEActKind kind = MoEActKind::kSiluGated;
  bool bias = false;
  // FP4 codes (make_fp4_matrix: bits 4, `group` columns a scale, zeros unused) or integers.
  cuda::Wna16Codes codes = cuda::Wna16Codes::kInteger;
  std::string describe() const {
    return fmt::format("M {} top_k {} E {} H {} I {} {}{} group {} {} act {} bias {}", tokens,
                       top_k, experts, hidden, inter, codes_label(codes), bits, group,
                       zeros_label(zeros), static_cast<int>(kind), bias);
  }
};

template <typename T>
QuantMatrix make_case_matrix(const MlpCase& c, int64_t rows, int64_t cols, int64_t parts,
                             std::mt19937& rng, bool on_device) {
  if (c.codes != cuda::Wna16Codes::kInteger) {
    return make_fp4_matrix<T>(c.codes, c.experts, rows, cols, c.group, parts, rng, on_device);
  }
  return make_matrix<T>(c.experts, rows, cols, c.bits, c.group, c.zeros, parts, rng, on_device);
}

// check_mlp's inputs, drawn from one seed (a host-only test draws the same ones): c.experts local
// experts out of c.experts + 2 global ones (global ids 1 and 4 are not local), random routing with
// the last token routed only to non-local experts (its output must be zero).
struct MlpInputs {
  std::vector<int32_t> expert_map;  // [global] local id or -1
  QuantMatrix w13, w2;
  std::vector<float> b13, b2;  // F32 [E, N1], [E, H]
  std::vector<float> x;        // [tokens, H], values of T
  std::vector<int32_t> ids;    // [tokens, top_k] global ids
  std::vector<float> weights;  // [tokens, top_k]
};

template <typename T>
MlpInputs make_mlp_inputs(const MlpCase& c, uint32_t seed, bool on_device) {
  std::mt19937 rng(seed);
  const bool gated = cuda::is_gated(c.kind);
  const int64_t n1 = gated ? 2 * c.inter : c.inter;
  const int64_t global = c.experts + 2;
  MlpInputs in;
  in.expert_map.resize(global);
  for (int64_t g = 0, local = 0; g < global; ++g) {
    in.expert_map[g] = (g == 1 || g == 4) ? -1 : static_cast<int32_t>(local++);
  }
  in.w13 = make_case_matrix<T>(c, n1, c.hidden, gated ? 2 : 1, rng, on_device);
  in.w2 = make_case_matrix<T>(c, c.hidden, c.inter, 1, rng, on_device);
  std::uniform_real_distribution<float> bias_value(-0.5f, 0.5f);
  in.b13.resize(c.experts * n1);
  in.b2.resize(c.experts * c.hidden);
  for (float& b : in.b13) b = bias_value(rng);
  for (float& b : in.b2) b = bias_value(rng);
  in.x = random_activations<T>(c.tokens, c.hidden, 1.0f, rng);
  const int64_t pairs = c.tokens * c.top_k;
  in.ids.resize(pairs);
  in.weights.resize(pairs);
  std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(global - 1));
  std::uniform_real_distribution<float> weight(0.1f, 1.0f);
  for (int64_t i = 0; i < pairs; ++i) {
    in.ids[i] = pick(rng);
    in.weights[i] = weight(rng);
  }
  if (c.tokens > 1) {
    for (int64_t j = 0; j < c.top_k; ++j) in.ids[(c.tokens - 1) * c.top_k + j] = j % 2 ? 1 : 4;
  }
  return in;
}

// check_mlp's bounds. The intermediate h is rounded to T by both; one ulp apart across a rounding
// boundary is possible, so the bounds are looser than one GEMM's (as the FP8 MLP test's); each
// pair's rounded y adds mlp_reference's allowance.
constexpr double kMlpRel = 1.0 / 64, kMlpAbs = 1.0 / 64, kMlpL2 = 1e-2;

// One ulp of T at v: the spacing of T's values around |v| (normal range).
template <typename T>
double ulp_of(double v) {
  constexpr int kMantissaBits = std::is_same_v<T, __half> ? 10 : 7;
  return v == 0.0 ? 0.0 : std::ldexp(1.0, std::ilogb(v) - kMantissaBits);
}

// The fp64 reference of the expert MLP over `w13` / `w2` ([E, N1, H] / [E, H, I] weights as
// floats) and `b13` / `b2` (null: no bias), the intermediate h and each pair's expert output y
// rounded to T as the kernels round them: out[t, col] = sum over the token's local pairs of
// weight · round_T(y). `allowance` gets, per element, the sum of weight · ulp_T(y) over those
// pairs: the kernel's y and the reference's round to neighbouring values of T when they straddle
// a rounding boundary, each pair's y by up to one ulp of its own size, which the combine keeps
// even where the pairs cancel (token 247 of the 300-token int4 g32 asym case: y -32.25 and 43.0,
// weights 0.88 and 0.61, out -2.64; both y one BF16 ulp (0.25) off in the same direction move
// out by 0.37, past 1/64 of it).
template <typename T>
void mlp_reference(const MlpCase& c, const MlpInputs& in, const std::vector<float>& w13,
                   const std::vector<float>& w2, const float* b13, const float* b2,
                   std::vector<double>& out, std::vector<double>& allowance) {
  const bool gated = cuda::is_gated(c.kind);
  const int64_t n1 = gated ? 2 * c.inter : c.inter;
  MoEActParams act;
  act.kind = c.kind;
  std::vector<float> h(c.inter);
  out.assign(c.tokens * c.hidden, 0.0);
  allowance.assign(c.tokens * c.hidden, 0.0);
  for (int64_t t = 0; t < c.tokens; ++t) {
    const float* xr = in.x.data() + t * c.hidden;
    for (int64_t j = 0; j < c.top_k; ++j) {
      const int32_t e = in.expert_map[in.ids[t * c.top_k + j]];
      if (e < 0) continue;
      for (int64_t i = 0; i < c.inter; ++i) {
        double g = dot(xr, w13.data() + (e * n1 + i) * c.hidden, c.hidden);
        double u = gated ? dot(xr, w13.data() + (e * n1 + c.inter + i) * c.hidden, c.hidden) : 0.0;
        if (b13 != nullptr) {
          g += b13[e * n1 + i];
          if (gated) u += b13[e * n1 + c.inter + i];
        }
        h[i] = round_to<T>(reference_activation(act, g, u));
      }
      const double w = in.weights[t * c.top_k + j];
      for (int64_t col = 0; col < c.hidden; ++col) {
        double y = dot(h.data(), w2.data() + (e * c.hidden + col) * c.inter, c.inter);
        if (b2 != nullptr) y += b2[e * c.hidden + col];
        out[t * c.hidden + col] += w * round_to<T>(y);
        allowance[t * c.hidden + col] += w * ulp_of<T>(y);
      }
    }
  }
}

// How check_mlp runs the expert MLP: the mma.sync GEMMs with `kernel`, or (dequant_budget > 0)
// the large-M path (launch_wna16_dequant_expert_mlp) with that budget and the BF16 grouped GEMMs
// `gemm1` / `gemm2` (unset: cuda_moe's choice for the shape).
struct MlpPath {
  Wna16GemmKernel kernel = Wna16GemmKernel::kMma64;
  int64_t dequant_budget = 0;
  std::optional<cuda::GroupedGemmKernel> gemm1, gemm2;
  std::string describe() const {
    if (dequant_budget <= 0) return std::string(cuda::wna16_gemm_kernel_name(kernel));
    return fmt::format("dequant budget {} gemms {}+{}", dequant_budget,
                       gemm1 ? cuda::grouped_gemm_kernel_name(*gemm1) : "chosen",
                       gemm2 ? cuda::grouped_gemm_kernel_name(*gemm2) : "chosen");
  }
};

MlpPath mma_path(Wna16GemmKernel kernel) {
  MlpPath path;
  path.kernel = kernel;
  return path;
}

// v with every value rounded to T.
template <typename T>
std::vector<float> rounded_to(std::vector<float> v) {
  for (float& f : v) f = round_to<T>(f);
  return v;
}

template <typename T>
void check_mlp(const MlpCase& c, const MlpPath& path, uint32_t seed) {
  SCOPED_TRACE(fmt::format("{} {} {}", dtype_label<T>(), path.describe(), c.describe()));
  const bool gated = cuda::is_gated(c.kind);
  const MlpInputs in = make_mlp_inputs<T>(c, seed, /*on_device=*/true);
  const std::vector<int32_t>& expert_map = in.expert_map;
  const QuantMatrix& w13 = in.w13;
  const QuantMatrix& w2 = in.w2;
  const std::vector<float>&b13 = in.b13, &b2 = in.b2, &x = in.x, &weights = in.weights;
  const std::vector<int32_t>& ids = in.ids;
  const int64_t global = c.experts + 2, pairs = c.tokens * c.top_k;

  const std::unique_ptr<DeviceBuffer> d_x = device_copy(to_dtype<T>(x));
  auto d_ids = device_copy(ids);
  auto d_w = device_copy(weights);
  auto d_map = device_copy(expert_map);
  auto d_b13 = device_copy(b13);
  auto d_b2 = device_copy(b2);
  DeviceBuffer d_counts(c.experts * 4), d_offsets((c.experts + 1) * 4), d_p2r(pairs * 4),
      d_r2p(pairs * 4), d_h(cuda::wna16_expert_mlp_scratch_bytes(pairs, c.inter, sizeof(T))),
      d_y(pairs * c.hidden * sizeof(T));
  cuda::MoEAlignment align;
  align.expert_counts = d_counts.as<int32_t>();
  align.expert_offsets = d_offsets.as<int32_t>();
  align.pair_to_row = d_p2r.as<int32_t>();
  align.row_to_pair = d_r2p.as<int32_t>();
  const size_t out_bytes = c.tokens * c.hidden * sizeof(T);
  DeviceBuffer d_out(out_bytes);
  // Kernels that read permuted rows (wna16_wgmma) get x gathered first, as the backend does.
  const bool gather = path.dequant_budget <= 0 && cuda::wna16_gemm_reads_permuted(path.kernel);
  DeviceBuffer d_x_perm(gather ? pairs * c.hidden * sizeof(T) : 16);

  cuda::Wna16ExpertMlpArgs args;
  args.x = d_x->as<void>();
  args.row_to_pair = align.row_to_pair;
  args.top_k = c.top_k;
  args.expert_offsets = align.expert_offsets;
  args.num_experts = c.experts;
  args.max_rows = pairs;
  args.hidden = c.hidden;
  args.inter = c.inter;
  args.w13 = w13.view;
  args.b13 = c.bias ? d_b13->as<float>() : nullptr;
  args.w2 = w2.view;
  args.b2 = c.bias ? d_b2->as<float>() : nullptr;
  args.act.kind = c.kind;
  args.h = d_h.as<void>();
  args.out = d_y.as<void>();
  if (gather) {
    args.x = d_x_perm.as<void>();
    args.row_to_pair = nullptr;
  }
  // The large-M path's arguments (used when path.dequant_budget > 0).
  const bool dequant = path.dequant_budget > 0;
  const CudaMoEProblem problem{c.experts, c.hidden,
                               c.inter,   c.top_k,
                               gated,     std::is_same_v<T, __half> ? DType::kF16 : DType::kBF16};
  const CudaDeviceTraits traits = cuda_device_traits(Device::cuda(0));
  cuda::Wna16DequantMlpArgs dq;
  dq.x = d_x->as<void>();
  dq.tokens = c.tokens;
  dq.top_k = c.top_k;
  dq.align = align;
  dq.num_experts = c.experts;
  dq.hidden = c.hidden;
  dq.inter = c.inter;
  dq.w13 = w13.view;
  dq.b13 = args.b13;
  dq.w2 = w2.view;
  dq.b2 = args.b2;
  dq.act.kind = c.kind;
  dq.gemm1 = path.gemm1.value_or(
      choose_grouped_gemm_kernel(grouped_gemm1(problem, c.tokens), traits, nullptr));
  dq.gemm2 = path.gemm2.value_or(
      choose_grouped_gemm_kernel(grouped_gemm2(problem, c.tokens), traits, nullptr));
  dq.budget_bytes = dequant ? path.dequant_budget : cuda::kWna16DequantBudgetBytes;
  DeviceBuffer d_scratch(dequant ? cuda::wna16_dequant_mlp_scratch_bytes(pairs, c.experts, c.hidden,
                                                                         c.inter, gated, sizeof(T),
                                                                         path.dequant_budget)
                                 : 16);
  dq.scratch = d_scratch.as<void>();
  dq.h = d_h.as<void>();
  dq.out = d_y.as<void>();
  const std::vector<uint8_t> bytes = run_eager_and_graph(
      [&](cudaStream_t s) {
        cuda::launch_moe_align(d_ids->as<int32_t>(), pairs, d_map->as<int32_t>(), global, c.experts,
                               align, s);
        if (dequant) {
          cuda::launch_wna16_dequant_expert_mlp<T>(dq, s);
        } else {
          if (gather) {
            cuda::launch_moe_gather<T>(d_x->as<void>(), c.tokens, c.top_k, c.hidden, align,
                                       d_x_perm.as<void>(), s);
          }
          cuda::launch_wna16_expert_mlp<T>(args, path.kernel, s);
        }
        cuda::launch_moe_combine<T>(d_y.as<void>(), align, d_ids->as<int32_t>(), d_w->as<float>(),
                                    d_map->as<int32_t>(), nullptr, c.tokens, c.top_k, c.hidden,
                                    d_out.as<void>(), s);
      },
      d_out, out_bytes);
  std::vector<T> out(c.tokens * c.hidden);
  std::memcpy(out.data(), bytes.data(), out_bytes);

  // The mma kernels' exact path multiplies the unrounded weights; the per-value path and the
  // large-M path (which writes round_T(fma(q, s, -z·s))) the weights rounded to T. The large-M
  // path adds its biases rounded to T (its grouped GEMMs read T biases), the mma kernels the F32
  // ones: the reference adds the biases the path adds (LargeMReferenceAddsTheBiasesThePathRounds).
  const bool exact = !dequant && cuda::wna16_gemm_exact(w13.view, path.kernel) &&
                     cuda::wna16_gemm_exact(w2.view, path.kernel);
  const std::vector<float> b13_ref = dequant ? rounded_to<T>(b13) : b13;
  const std::vector<float> b2_ref = dequant ? rounded_to<T>(b2) : b2;
  std::vector<double> ref, allowance;
  mlp_reference<T>(c, in, exact ? w13.unpacked : w13.ref, exact ? w2.unpacked : w2.ref,
                   c.bias ? b13_ref.data() : nullptr, c.bias ? b2_ref.data() : nullptr, ref,
                   allowance);
  std::vector<double> got(out.size());
  for (size_t i = 0; i < out.size(); ++i) got[i] = to_f32(out[i]);
  if (c.tokens > 1) {
    for (int64_t col = 0; col < c.hidden; ++col) {
      ASSERT_EQ(got[(c.tokens - 1) * c.hidden + col], 0.0) << "a token without local experts";
    }
  }
  const std::string why = compare_bounded(got, ref, kMlpRel, kMlpAbs, kMlpL2, &allowance);
  EXPECT_TRUE(why.empty()) << why;
}

TEST(CudaWna16Experts, ExpertMlpEveryKernelMatchesReference) {
  MG_REQUIRE_GPU();
  uint32_t seed = 3000;
  std::vector<MlpCase> cases;
  int index = 0;
  for (const int64_t tokens : {int64_t{1}, int64_t{8}, int64_t{300}}) {
    for (const int bits : {4, 8}) {
      for (const int64_t group : {int64_t{32}, int64_t{128}, int64_t{-1}}) {
        MlpCase c;
        c.tokens = tokens;
        c.top_k = index % 2 == 0 ? 2 : 4;
        c.bits = bits;
        c.group = group;
        constexpr Zeros kZeros[] = {Zeros::kSymmetric, Zeros::kF32, Zeros::kU8, Zeros::kF32Real};
        c.zeros = kZeros[(index + index / 4) % 4];  // every kind gated and plain, at every M
        c.kind = index % 4 == 3 ? kPlainKinds[index % 3] : kGatedKinds[index % 4];
        c.bias = index % 2 == 1;
        // H 256 I 128, or H 384 I 72 (I not a multiple of 64 nor of 128: partial tiles and a
        // channel-wise-only K for GEMM2).
        if (index % 2 == 1 && group == -1) {
          c.hidden = 384;
          c.inter = 72;
        }
        cases.push_back(c);
        ++index;
      }
    }
  }
  for (const MlpCase& c : cases) {
    for (const Wna16GemmKernel kernel : kMmaKernels) {
      for_each_dtype([&]<typename T>() { check_mlp<T>(c, mma_path(kernel), ++seed); });
    }
  }
}

// wna16_wgmma (sm_90a) against the reference over what it takes: INT4 codes with integer zero
// points (symmetric, F32 and U8 zero points) in groups of 32, 64, 128 or channel-wise, gated and
// plain activations, biases, BF16 and F16; shapes with a partial K step (H 264), partial feature
// tiles (I 136, I 72 whose GEMM2 K is below one 128-wide step), experts with more rows than one
// 64-token tile (300 tokens) and with none (the fewest rows it takes: 8 tokens x top-2).
TEST(CudaWna16Experts, WgmmaExpertMlpMatchesReference) {
  MG_REQUIRE_GPU();
  uint32_t seed = 7000;
  constexpr MoEActKind kKinds[] = {MoEActKind::kSiluGated, MoEActKind::kSwigluOai,
                                   MoEActKind::kGelu, MoEActKind::kGeluGated};
  constexpr Zeros kZeros[] = {Zeros::kSymmetric, Zeros::kF32, Zeros::kU8};
  struct Shape {
    int64_t hidden, inter;
  };
  constexpr Shape kShapes[] = {{256, 128}, {264, 136}, {384, 72}};
  int index = 0;
  for (const int64_t tokens : {int64_t{8}, int64_t{100}, int64_t{300}}) {
    for (const int64_t group : {int64_t{32}, int64_t{64}, int64_t{128}, int64_t{-1}}) {
      MlpCase c;
      c.tokens = tokens;
      c.top_k = index % 2 == 0 ? 2 : 4;
      c.experts = index % 3 == 0 ? 8 : 5;
      c.bits = 4;
      c.group = group;
      c.zeros = kZeros[index % 3];
      c.kind = kKinds[index % 4];
      c.bias = index % 2 == 1;
      const Shape shape = kShapes[index % 3];
      c.hidden = shape.hidden;
      c.inter = shape.inter;
      // Groups must divide K (H 264, I 136 and I 72 are channel-wise only): grouped cases take
      // H 288 (a partial K step) and I 160 (partial feature tiles) where the group divides them.
      const auto divides = [&](int64_t h, int64_t i) { return h % group == 0 && i % group == 0; };
      if (group > 0 && !divides(c.hidden, c.inter)) {
        c.hidden = divides(288, 160) ? 288 : 256;
        c.inter = divides(288, 160) ? 160 : 128;
      }
      ++index;
      for_each_dtype(
          [&]<typename T>() { check_mlp<T>(c, mma_path(Wna16GemmKernel::kWgmma), ++seed); });
    }
  }
}

// What wna16_wgmma does not take is refused with the reason, naming the kernel.
TEST(CudaWna16Experts, WgmmaRefusesWhatItDoesNotTake) {
  MG_REQUIRE_GPU();
  MlpCase c;
  c.tokens = 100;
  const auto refused = [&](const MlpCase& m, const char* why) {
    try {
      check_mlp<__nv_bfloat16>(m, mma_path(Wna16GemmKernel::kWgmma), 1);
      ADD_FAILURE() << "not refused: " << m.describe();
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("wna16_wgmma"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
    }
  };
  MlpCase int8 = c;
  int8.bits = 8;
  refused(int8, "INT4 codes");
  MlpCase real = c;
  real.zeros = Zeros::kF32Real;
  refused(real, "INT4 codes");
  MlpCase fp4 = c;
  fp4.codes = cuda::Wna16Codes::kMxfp4;
  fp4.group = 32;
  refused(fp4, "INT4 codes");
  MlpCase few = c;
  few.tokens = 5;  // 10 rows
  refused(few, ">= 16 rows");
}

// mlp_reference's allowance, on the host (runs without a GPU): the one failure the H100 showed
// (DequantExpertMlpMatchesReference, BF16 seed 6565: 300 tokens, int4 groups of 32, asymmetric
// F32 zeros, SiLU-gated, biases; element 63293 = token 247 column 61 came back -2.265625, the
// reference -2.6427, bound 0.24) is the kernels' arithmetic, not a wrong result: the same inputs
// through that arithmetic on the host (weights as the layout reads back, fma(q, s, -z·s) rounded
// to T, which is what the dequantize kernel writes and the mma kernels' B operand; biases rounded
// to T as the dequantized GEMMs read them; h and y rounded to T) give exactly that value. Its two
// pairs' y (-32.25 and 43.0) each round one BF16 ulp (0.25) from the reference's, weighted 0.88
// and 0.61, in a sum that cancels to -2.64. Not rare: through the same host arithmetic, the old
// bound (no allowance) rejected 12 of 60 seeds of this shape (top_k 2 / 4, int4 / int8, a sweep not
// kept), the allowance none. A wrong weight or row still moves results by far more.
TEST(CudaWna16Experts, MlpAllowanceCoversEachPairsRounding) {
  using T = __nv_bfloat16;
  MlpCase c;
  c.tokens = 300;
  c.top_k = 2;
  c.bits = 4;
  c.group = 32;
  c.zeros = Zeros::kF32;
  c.kind = MoEActKind::kSiluGated;
  c.bias = true;
  const MlpInputs in = make_mlp_inputs<T>(c, 6565, /*on_device=*/false);
  std::vector<double> ref, allowance;
  mlp_reference<T>(c, in, in.w13.ref, in.w2.ref, in.b13.data(), in.b2.data(), ref, allowance);

  const std::vector<float> w13 = rounded_to<T>(in.w13.unpacked);
  const std::vector<float> w2 = rounded_to<T>(in.w2.unpacked);
  const std::vector<float> b13 = rounded_to<T>(in.b13), b2 = rounded_to<T>(in.b2);
  std::vector<double> kernel, unused;
  mlp_reference<T>(c, in, w13, w2, b13.data(), b2.data(), kernel, unused);
  for (double& v : kernel) v = round_to<T>(v);  // the combine's output

  constexpr int64_t kElement = 247 * 256 + 61;
  EXPECT_EQ(kernel[kElement], -2.265625);
  EXPECT_NEAR(ref[kElement], -2.6426754, 1e-5);  // (the H100 run multiplied in F32)
  EXPECT_NE(compare_bounded(kernel, ref, kMlpRel, kMlpAbs, kMlpL2).find("1 of 76800 elements"),
            std::string::npos)
      << "without the allowance exactly the H100's element is out of bounds";
  EXPECT_EQ(compare_bounded(kernel, ref, kMlpRel, kMlpAbs, kMlpL2, &allowance), "");
}

// Why check_mlp's reference adds the large-M path's biases rounded to T (host only, runs without
// a GPU). A bias rounded or not can move an intermediate h across a rounding boundary of T, and a
// large h's ulp times its w2 weights then moves y far more than y's own rounding, which is all the
// allowance covers. Found on an H200 (the fused large-M experiment of session 35, whose output
// equals this path's bit for bit): MXFP4 BF16, 300 tokens, top_k 2, H 256 I 128, SiLU-gated,
// biases, seed 9125: element 43012 (token 168, column 4, both pairs on one expert) came back
// 0.28125, the reference with F32 biases 0.0696 (allowance 0.0005). The path's own arithmetic on
// the host (biases rounded to T, h and y rounded to T) gives exactly the GPU's value.
TEST(CudaWna16Experts, LargeMReferenceAddsTheBiasesThePathRounds) {
  using T = __nv_bfloat16;
  MlpCase c;
  c.tokens = 300;
  c.top_k = 2;
  c.codes = cuda::Wna16Codes::kMxfp4;
  c.bits = 4;
  c.group = 32;
  c.kind = MoEActKind::kSiluGated;
  c.bias = true;
  const MlpInputs in = make_mlp_inputs<T>(c, 9125, /*on_device=*/false);
  const std::vector<float> b13_t = rounded_to<T>(in.b13), b2_t = rounded_to<T>(in.b2);
  std::vector<double> f32_biases, t_biases, allowance, unused;
  mlp_reference<T>(c, in, in.w13.ref, in.w2.ref, in.b13.data(), in.b2.data(), f32_biases,
                   allowance);
  mlp_reference<T>(c, in, in.w13.ref, in.w2.ref, b13_t.data(), b2_t.data(), t_biases, unused);
  constexpr int64_t kElement = 168 * 256 + 4;
  EXPECT_NEAR(f32_biases[kElement], 0.0695893, 1e-6);
  EXPECT_EQ(round_to<T>(t_biases[kElement]), 0.28125);  // the H200's value
  for (double& v : t_biases) v = round_to<T>(v);
  EXPECT_NE(compare_bounded(t_biases, f32_biases, kMlpRel, kMlpAbs, kMlpL2, &allowance)
                .find("element 43012"),
            std::string::npos);
}

// ---- 3b. The large-M path: dequantize once, then the BF16 / F16 grouped GEMMs ------------------

// The chunks of experts fit the budget (host only, runs without a GPU): DeepSeek-V3's 22.5 GB of
// dense BF16 experts become 22 chunks of at most 12 (1008 MiB), Qwen3-30B-A3B's two of 64, a
// budget below one expert one expert a chunk, and the chunks always cover every expert.
TEST(CudaWna16Experts, DequantChunksFitTheBudget) {
  const int64_t budget = cuda::kWna16DequantBudgetBytes;
  const int64_t deepseek_expert = (2 * 2048 + 2048) * int64_t{7168} * 2;
  cuda::Wna16DequantChunks c = cuda::wna16_dequant_chunks(256, 7168, 2048, true, 2, budget);
  EXPECT_EQ(c.chunks, 22);
  EXPECT_EQ(c.experts_per_chunk, 12);
  EXPECT_LE(c.experts_per_chunk * deepseek_expert, budget);
  // The scratch: the gathered rows of 4096 tokens x 8 and one chunk, nothing of the other 244.
  const size_t x_perm = size_t{4096} * 8 * 7168 * 2;
  const size_t scratch = cuda::wna16_dequant_mlp_scratch_bytes(4096 * 8, 256, 7168, 2048, true, 2);
  EXPECT_GE(scratch, x_perm + 12 * static_cast<size_t>(deepseek_expert));
  EXPECT_LE(scratch, x_perm + static_cast<size_t>(budget) + (size_t{1} << 20));

  c = cuda::wna16_dequant_chunks(128, 2048, 768, true, 2, budget);
  EXPECT_EQ(c.chunks, 2);
  EXPECT_EQ(c.experts_per_chunk, 64);

  const int64_t small_expert = (2 * 128 + 128) * int64_t{256} * 2;
  c = cuda::wna16_dequant_chunks(5, 256, 128, true, 2, 1);
  EXPECT_EQ(c.chunks, 5);
  EXPECT_EQ(c.experts_per_chunk, 1);
  c = cuda::wna16_dequant_chunks(5, 256, 128, true, 2, small_expert * 5 / 2);
  EXPECT_EQ(c.chunks, 3);  // 2, 2, 1
  EXPECT_EQ(c.experts_per_chunk, 2);
  c = cuda::wna16_dequant_chunks(5, 256, 128, false, 4, int64_t{1} << 40);
  EXPECT_EQ(c.chunks, 1);
  EXPECT_EQ(c.experts_per_chunk, 5);
  c = cuda::wna16_dequant_chunks(0, 256, 128, true, 2, budget);
  EXPECT_EQ(c.chunks, 0);
}

// The bits of x rounded to T, and the value of T's bits.
template <typename T>
uint16_t f32_to_bits(float x) {
  if constexpr (std::is_same_v<T, __half>) {
    return static_cast<__half_raw>(__float2half_rn(x)).x;
  } else {
    return static_cast<__nv_bfloat16_raw>(__float2bfloat16_rn(x)).x;
  }
}
template <typename T>
float bits_to_f32(uint16_t b) {
  if constexpr (std::is_same_v<T, __half>) {
    __half_raw r;
    r.x = b;
    return __half2float(__half(r));
  } else {
    __nv_bfloat16_raw r;
    r.x = b;
    return __bfloat162float(__nv_bfloat16(r));
  }
}

struct DequantCase {
  const char* name;
  cuda::Wna16Codes codes;
  int bits;
  int64_t group;
  Zeros zeros;
  int64_t parts, n, k;  // rows of a part (not a multiple of 8: padded parts), columns
};

// launch_wna16_dequantize writes each weight exactly as the mma path's B operand: for integer
// codes and MXFP4 the very value of the host read-back of the layout rounded to T (NVFP4: within
// one ulp of T, the host multiplying e4m3 by the global first), each part's rows where the dense
// layout puts them (gate rows, then up rows, without the parts' padding), the biases rounded to
// T; an expert with no rows is not written at all (poisoned bytes stay), and with no offsets every
// expert of the range is.
TEST(CudaWna16Experts, DequantizeWritesTheMmaPathsWeights) {
  MG_REQUIRE_GPU();
  const std::vector<DequantCase> cases = {
      {"int4 g32 asym, K 1.5 steps", cuda::Wna16Codes::kInteger, 4, 32, Zeros::kF32, 2, 44, 192},
      {"int4 g128 sym", cuda::Wna16Codes::kInteger, 4, 128, Zeros::kSymmetric, 1, 40, 256},
      {"int4 channel asym-u8, K 200", cuda::Wna16Codes::kInteger, 4, -1, Zeros::kU8, 2, 24, 200},
      {"int8 g64 asym", cuda::Wna16Codes::kInteger, 8, 64, Zeros::kF32, 1, 36, 192},
      {"int8 channel sym, K 136", cuda::Wna16Codes::kInteger, 8, -1, Zeros::kSymmetric, 2, 16, 136},
      {"mxfp4, partial last group", cuda::Wna16Codes::kMxfp4, 4, 32, Zeros::kSymmetric, 2, 20, 208},
      {"nvfp4, partial last group", cuda::Wna16Codes::kNvfp4, 4, 16, Zeros::kSymmetric, 2, 28, 136},
      {"nvfp4 plain", cuda::Wna16Codes::kNvfp4, 4, 32, Zeros::kSymmetric, 1, 12, 256},
  };
  const int64_t E = 4;
  uint32_t seed = 6100;
  for (const DequantCase& c : cases) {
    for_each_dtype([&]<typename T>() {
      SCOPED_TRACE(fmt::format("{} {}", c.name, dtype_label<T>()));
      std::mt19937 rng(++seed);
      const int64_t rows = c.parts * c.n;
      const QuantMatrix m =
          c.codes == cuda::Wna16Codes::kInteger
              ? make_matrix<T>(E, rows, c.k, c.bits, c.group, c.zeros, c.parts, rng)
              : make_fp4_matrix<T>(c.codes, E, rows, c.k, c.group, c.parts, rng);
      std::uniform_real_distribution<float> bias_value(-0.5f, 0.5f);
      std::vector<float> bias(E * rows);
      for (float& b : bias) b = bias_value(rng);
      const auto d_bias = device_copy(bias);
      // Experts 1..3 (local 0..2); local 1 gets no rows.
      const std::vector<int32_t> offsets = {0, 3, 3, 5};
      const auto d_offsets = device_copy(offsets);
      const size_t matrix_bytes = static_cast<size_t>(E * rows * c.k) * sizeof(T);
      DeviceBuffer d_out(matrix_bytes), d_bias_out(E * rows * sizeof(T));
      constexpr uint8_t kPoison = 0xAB;
      const bool nv = c.codes == cuda::Wna16Codes::kNvfp4;
      // One ulp of T relative to the value (7 or 10 mantissa bits): NVFP4 only.
      const double ulp = std::is_same_v<T, __half> ? 1.0 / 1024 : 1.0 / 128;

      for (const bool skip_empty : {true, false}) {
        SCOPED_TRACE(skip_empty ? "experts 1..3 with offsets" : "experts 0..3, no offsets");
        const int64_t begin = skip_empty ? 1 : 0, count = skip_empty ? 3 : E;
        MG_CUDA_CHECK(cudaMemset(d_out.as<void>(), kPoison, matrix_bytes));
        MG_CUDA_CHECK(cudaMemset(d_bias_out.as<void>(), kPoison, E * rows * sizeof(T)));
        cuda::Wna16DequantArgs a;
        a.w = m.view;
        a.bias = d_bias->as<float>();
        a.expert_begin = begin;
        a.expert_count = count;
        a.expert_offsets = skip_empty ? d_offsets->as<int32_t>() : nullptr;
        a.n = c.n;
        a.k = c.k;
        a.out = d_out.as<void>();
        a.bias_out = d_bias_out.as<void>();
        cuda::launch_wna16_dequantize<T>(a, nullptr);
        MG_CUDA_CHECK(cudaDeviceSynchronize());
        std::vector<uint16_t> out(E * rows * c.k), bias_out(E * rows);
        d_out.download(out.data(), matrix_bytes);
        d_bias_out.download(bias_out.data(), bias_out.size() * 2);
        const uint16_t poison = kPoison * 0x101;
        int64_t wrong = 0, poisoned = 0;
        for (int64_t l = 0; l < count; ++l) {
          const bool empty = skip_empty && l == 1;
          const int64_t e = begin + l;
          for (int64_t r = 0; r < rows; ++r) {
            for (int64_t col = 0; col < c.k; ++col) {
              const uint16_t got = out[(l * rows + r) * c.k + col];
              if (empty) {
                poisoned += got == poison;
                continue;
              }
              const float want_f = m.unpacked[(e * rows + r) * c.k + col];
              const uint16_t want_bits = f32_to_bits<T>(want_f);
              if (nv) {
                const double diff = std::abs(static_cast<double>(bits_to_f32<T>(got)) - want_f);
                if (diff > ulp * std::abs(want_f) * 1.001) ++wrong;
              } else if (bits_to_f32<T>(got) != bits_to_f32<T>(want_bits)) {
                // Equal as values (a zero's sign may differ: E2M1 code 8 is -0).
                if (wrong < 5) {
                  ADD_FAILURE() << fmt::format("expert {} row {} col {}: {:#06x}, want {:#06x}", e,
                                               r, col, got, want_bits);
                }
                ++wrong;
              }
            }
            const uint16_t got_b = bias_out[l * rows + r];
            if (empty) {
              EXPECT_EQ(got_b, poison) << "the bias of an expert with no rows was written";
            } else {
              EXPECT_EQ(got_b, f32_to_bits<T>(bias[e * rows + r]))
                  << "bias of expert " << e << " row " << r;
            }
          }
        }
        EXPECT_EQ(wrong, 0);
        if (skip_empty) {
          EXPECT_EQ(poisoned, rows * c.k) << "an expert with no rows was written";
        }
        // Experts outside the range are not written either.
        for (int64_t i = count * rows * c.k; i < E * rows * c.k; ++i) {
          if (out[i] != poison) {
            ADD_FAILURE() << "written past the range at " << i;
            break;
          }
        }
      }
    });
  }
}

// The large-M path's expert MLP (align -> gather -> per chunk: dequantize + BF16 / F16 grouped
// GEMM1 + act, GEMM2 -> combine) against the fp64 reference on the same weights, eager and
// replayed from a CUDA graph (bit for bit): INT4 / INT8 with groups of 32, 128 and channel-wise,
// symmetric and asymmetric, MXFP4 and NVFP4 (partial last groups); 1, 7 and 300 tokens (1 and 7:
// most experts get no rows, so their dequantization is skipped); every activation, biases; H and I
// not multiples of 16 (I 72 and 40, H 264); budgets of the default (one chunk), 2.5 experts (3
// chunks: 2, 2, 1) and 1 byte (5 chunks of one expert); the GEMMs cuda_moe would choose (TMA at
// 300 tokens on an H100) and mma16 forced.
TEST(CudaWna16Experts, DequantExpertMlpMatchesReference) {
  MG_REQUIRE_GPU();
  struct Codes {
    cuda::Wna16Codes codes;
    int bits;
    int64_t group;
  };
  const Codes kinds[] = {{cuda::Wna16Codes::kInteger, 4, 32},  {cuda::Wna16Codes::kInteger, 4, 128},
                         {cuda::Wna16Codes::kInteger, 4, -1},  {cuda::Wna16Codes::kInteger, 8, 32},
                         {cuda::Wna16Codes::kInteger, 8, 128}, {cuda::Wna16Codes::kInteger, 8, -1},
                         {cuda::Wna16Codes::kMxfp4, 4, 32},    {cuda::Wna16Codes::kNvfp4, 4, 16}};
  uint32_t seed = 6500;
  int index = 0;
  for (const int64_t tokens : {int64_t{1}, int64_t{7}, int64_t{300}}) {
    for (const Codes& kind : kinds) {
      MlpCase c;
      c.tokens = tokens;
      c.top_k = index % 2 == 0 ? 2 : 4;
      c.codes = kind.codes;
      c.bits = kind.bits;
      c.group = kind.group;
      c.zeros = index % 3 == 0 ? Zeros::kSymmetric : index % 3 == 1 ? Zeros::kF32 : Zeros::kU8;
      c.kind = index % 4 == 3 ? kPlainKinds[index % 3] : kGatedKinds[index % 4];
      c.bias = index % 2 == 0;
      // Shapes the groups allow: H 256 I 128; channel-wise and FP4 (partial last groups) also
      // H 384 I 72 and H 264 I 40.
      if (kind.group == -1 || kind.codes != cuda::Wna16Codes::kInteger) {
        if (index % 3 == 1) {
          c.hidden = 384;
          c.inter = 72;
        } else if (index % 3 == 2) {
          c.hidden = 264;
          c.inter = 40;
        }
      }
      const bool gated = cuda::is_gated(c.kind);
      for_each_dtype([&]<typename T>() {
        const int64_t expert_bytes =
            ((gated ? 2 : 1) * c.inter + c.inter) * c.hidden * static_cast<int64_t>(sizeof(T));
        const int64_t budgets[] = {cuda::kWna16DequantBudgetBytes, expert_bytes * 5 / 2, 1};
        MlpPath chosen;
        chosen.dequant_budget = budgets[index % 3];
        check_mlp<T>(c, chosen, ++seed);
        MlpPath mma16;
        mma16.dequant_budget = budgets[(index + 1) % 3];
        mma16.gemm1 = cuda::GroupedGemmKernel::kMma16;
        mma16.gemm2 = cuda::GroupedGemmKernel::kMma16;
        check_mlp<T>(c, mma16, ++seed);
      });
      ++index;
    }
  }
}

// ---- 4. The cuda_wna16 backend: routing included, against the reference layer ------------------

Tensor host_tensor(DType dtype, Shape shape, const void* data) {
  Tensor t = Tensor::empty_cpu(dtype, std::move(shape));
  std::memcpy(t.raw(), data, t.numel() * dtype_size(dtype));
  return t;
}

// make_cuda_wna16_experts on random asymmetric weights with biases, routed from random logits on
// the GPU, against reference::experts on the dequantized weights and the fp64 routing (BF16
// activations: weights and the intermediate rounded to BF16, so a normalised error within 2e-2);
// the kernel chosen (the decode path at M <= wna16_decode_threshold), the decode path forced
// (`wna16_decode`, up to 16 tokens), the large-M path forced (`wna16_dequant`: dequantize + the
// BF16 grouped GEMMs at any M) and both GEMM tiles forced.
TEST(CudaWna16Experts, BackendMatchesReferenceLayer) {
  MG_REQUIRE_GPU();
  const int64_t E = 6, k = 2, H = 256, I = 128;
  uint32_t seed = 4000;
  for (const MoEActivation act : {MoEActivation::kSiluGated, MoEActivation::kGelu}) {
    const MoEConfig config = moe_test::experts_config(E, k, H, I, act, /*biases=*/true);
    ExpertsShape shape = local_experts_shape(config, ParallelConfig());
    shape.dtype = DType::kBF16;
    const int64_t n1 = shape.w13_rows();
    for (const int bits : {4, 8}) {
      for (const int64_t group : {int64_t{32}, int64_t{128}, int64_t{-1}}) {
        for (const char* kernel : {"auto", "wna16_decode", "wna16_dequant", "wna16_mma16",
                                   "wna16_mma32", "wna16_mma64", "wna16_wgmma"}) {
          for (const int64_t M : {int64_t{1}, int64_t{2}, int64_t{5}, int64_t{300}}) {
            // wna16_wgmma takes INT4 and >= 16 rows (its own tests cover the refusals).
            if (std::string_view(kernel) == "wna16_wgmma" && (bits != 4 || M * k < 16)) continue;
            SCOPED_TRACE(fmt::format("act {} int{} group {} kernel {} M {}", static_cast<int>(act),
                                     bits, group, kernel, M));
            ++seed;
            const CanonicalExpertWeights w = moe_test::random_weights(config, seed);
            const auto quantized = [&](const Tensor& f32, int64_t rows, int64_t cols,
                                       Tensor& dequantized) {
              const cuda::Wna16HostCodes q = cuda::wna16_quantize_host(
                  f32.data<float>(), E, rows, cols, bits, group, /*symmetric=*/false);
              const std::vector<float> d = cuda::wna16_dequantize_host(q.view());
              dequantized = host_tensor(DType::kF32, {E, rows, cols}, d.data());
              const int64_t groups = cuda::wna16_groups(cols, group);
              Wna16MatrixTensors m;
              m.codes = host_tensor(DType::kU8, {E, rows, cols}, q.codes.data());
              m.scales = host_tensor(DType::kF32, {E, rows, groups}, q.scales.data());
              m.zeros = host_tensor(DType::kF32, {E, rows, groups}, q.zeros.data());
              m.bits = bits;
              m.group_size = group;
              return m;
            };
            Tensor d13, d2;
            const Wna16MatrixTensors m13 = quantized(w.w13, n1, H, d13);
            const Wna16MatrixTensors m2 = quantized(w.w2, H, I, d2);
            ExpertsBuild build{config, shape, Device::cuda(0), CanonicalExpertWeights{}, Tensor()};
            build.kernel = kernel;
            build.quantized.w13_bias = w.w13_bias;
            build.quantized.w2_bias = w.w2_bias;
            std::unique_ptr<Experts> experts = make_cuda_wna16_experts(build, m13, m2);
            auto* mono = dynamic_cast<ExpertsMonolithic*>(experts.get());
            ASSERT_NE(mono, nullptr);
            EXPECT_TRUE(experts->graph_capturable());

            std::mt19937 rng(seed);
            const std::vector<float> x = random_activations<__nv_bfloat16>(M, H, 1.0f, rng);
            std::vector<float> logits(M * E);
            std::uniform_real_distribution<float> logit(-2.0f, 2.0f);
            for (float& v : logits) v = logit(rng);
            const std::unique_ptr<DeviceBuffer> d_x = device_copy(to_dtype<__nv_bfloat16>(x));
            const std::unique_ptr<DeviceBuffer> d_logits = device_copy(logits);
            DeviceBuffer d_out(M * H * 2), d_ws(experts->workspace_bytes(M));
            DispatchedLogits t;
            t.hidden = d_x->as<void>();
            t.router_logits = d_logits->as<float>();
            t.num_tokens = M;
            t.expert_output = d_out.as<void>();
            Workspace ws(d_ws.as<void>(), experts->workspace_bytes(M));
            mono->apply(t, ws, MoEExecContext{});
            MG_CUDA_CHECK(cudaDeviceSynchronize());
            std::vector<__nv_bfloat16> out(M * H);
            d_out.download(out.data(), out.size() * 2);
            std::vector<float> got(out.size());
            for (size_t i = 0; i < out.size(); ++i) got[i] = to_f32(out[i]);

            const reference::Routing r = reference::route(config.routing(), logits, M, {});
            const std::vector<float> want =
                reference::experts(config, x, M, r.ids, r.weights, d13, w.w13_bias, d2, w.w2_bias);
            EXPECT_LE(testing::normalized_error(got, want), 2e-2);
          }
        }
      }
    }
  }
}

// The random packed weights of the benchmarks: unpacked on the host they are codes in range with
// their pairs, and the GEMM over them matches the reference on the unpacked weights.
TEST(CudaWna16Experts, RandomFillRunsThroughTheGemm) {
  MG_REQUIRE_GPU();
  using T = __nv_bfloat16;
  const int64_t E = 3, n = 40, K = 256;
  for (const int bits : {4, 8}) {
    cuda::Wna16PackedHost p = cuda::wna16_layout(E, 2 * n, K, bits, 64, 2);
    DeviceBuffer d_words(p.word_count() * 4), d_params(p.param_count() * 4);
    cuda::launch_wna16_random_fill(d_words.as<uint32_t>(), p.word_count(), d_params.as<float>(),
                                   p.param_count(), bits, 0.05f, 99, nullptr);
    MG_CUDA_CHECK(cudaDeviceSynchronize());
    p.words.resize(p.word_count());
    p.params.resize(p.param_count());
    d_words.download(p.words.data(), p.words.size() * 4);
    d_params.download(p.params.data(), p.params.size() * 4);
    std::vector<float> w = cuda::wna16_unpack_host(p, 2 * n);
    for (float& v : w) v = round_to<T>(v);
    double w2 = 0.0;
    for (const float v : w) w2 += static_cast<double>(v) * v;
    EXPECT_GT(w2, 0.0);
    EXPECT_TRUE(std::isfinite(w2));

    const std::vector<int32_t> offsets = {0, 5, 5, 70};
    std::mt19937 rng(bits);
    const std::vector<float> x = random_activations<T>(70, K, 1.0f, rng);
    const std::unique_ptr<DeviceBuffer> d_x = device_copy(to_dtype<T>(x));
    const std::unique_ptr<DeviceBuffer> d_offsets = device_copy(offsets);
    DeviceBuffer d_c(70 * n * sizeof(T));
    cuda::Wna16GemmArgs args;
    args.a = d_x->as<void>();
    args.b = cuda::wna16_weights_view(p, d_words.as<uint32_t>(), d_params.as<float>());
    args.c = d_c.as<void>();
    args.expert_offsets = d_offsets->as<int32_t>();
    args.num_experts = E;
    args.max_rows = 70;
    args.n = n;
    args.k = K;
    args.epilogue = GroupedEpilogue::kActivation;
    args.act.kind = MoEActKind::kSiluGated;
    for (const Wna16GemmKernel kernel : kMmaKernels) {
      SCOPED_TRACE(fmt::format("int{} {}", bits, cuda::wna16_gemm_kernel_name(kernel)));
      cuda::launch_wna16_grouped_gemm<T>(args, kernel, nullptr);
      MG_CUDA_CHECK(cudaDeviceSynchronize());
      std::vector<T> out(70 * n);
      d_c.download(out.data(), out.size() * sizeof(T));
      std::vector<double> got, ref;
      for (int64_t row = 0; row < 70; ++row) {
        const int64_t e = row < 5 ? 0 : 2;
        for (int64_t col = 0; col < n; ++col) {
          const double g = dot(x.data() + row * K, w.data() + (e * 2 * n + col) * K, K);
          const double u = dot(x.data() + row * K, w.data() + (e * 2 * n + n + col) * K, K);
          ref.push_back(reference_activation(args.act, g, u));
          got.push_back(to_f32(out[row * n + col]));
        }
      }
      const std::string why =
          compare_bounded(got, ref, Bounds<T>::kRel, Bounds<T>::kAbs, Bounds<T>::kL2);
      EXPECT_TRUE(why.empty()) << why;
    }
  }
}

// ---- 5. Timing (MG_WNA16_TIMING=1; prints, asserts nothing) ---------------------------------

// align -> GEMM1 + act -> GEMM2 -> combine on a Qwen3-30B-A3B-shaped layer (E 128, H 2048, I 768,
// top 8) with random packed weights made on the GPU (launch_wna16_random_fill),
// against the floor of the packed bytes (codes + F32 group pairs) of the touched experts at
// 3.35 TB/s. Run on an H100 with
//   MG_WNA16_TIMING=1 build/tests/mg_cuda_tests --gtest_filter='CudaWna16Experts.Timing*'
TEST(CudaWna16Experts, TimingQwen3Shape) {
  MG_REQUIRE_GPU();
  if (std::getenv("MG_WNA16_TIMING") == nullptr) GTEST_SKIP() << "set MG_WNA16_TIMING=1 to time";
  using T = __nv_bfloat16;
  const int64_t E = 128, H = 2048, I = 768, top_k = 8;
  std::mt19937 rng(5);
  for (const auto& [bits, group] : {std::pair<int, int64_t>{4, 128}, {4, 32}, {8, -1}}) {
    // Random packed weights made on the GPU, as the benchmarks make them.
    const auto matrix = [&](int64_t rows, int64_t cols, int64_t parts) {
      const cuda::Wna16PackedHost p = cuda::wna16_layout(E, rows, cols, bits, group, parts);
      QuantMatrix m;
      m.words = std::make_unique<DeviceBuffer>(p.word_count() * 4);
      m.params = std::make_unique<DeviceBuffer>(p.param_count() * 4);
      cuda::launch_wna16_random_fill(m.words->as<uint32_t>(), p.word_count(), m.params->as<float>(),
                                     p.param_count(), bits, 0.01f, static_cast<uint64_t>(rows),
                                     nullptr);
      m.view = cuda::wna16_weights_view(p, m.words->as<uint32_t>(), m.params->as<float>());
      return std::make_pair(std::move(m), p.bytes_per_expert());
    };
    auto [w13, w13_bytes] = matrix(2 * I, H, 2);
    auto [w2, w2_bytes] = matrix(H, I, 1);
    for (const int64_t M : {1, 2, 4, 8, 16, 64, 256}) {
      const int64_t pairs = M * top_k;
      std::vector<int32_t> ids(pairs), map(E);
      std::vector<float> weights(pairs, 0.125f);
      for (int64_t e = 0; e < E; ++e) map[e] = static_cast<int32_t>(e);
      std::vector<bool> touched(E, false);
      for (int64_t t = 0; t < M; ++t) {
        std::vector<int32_t> perm(E);
        for (int64_t e = 0; e < E; ++e) perm[e] = static_cast<int32_t>(e);
        std::shuffle(perm.begin(), perm.end(), rng);
        for (int64_t j = 0; j < top_k; ++j) {
          ids[t * top_k + j] = perm[j];
          touched[perm[j]] = true;
        }
      }
      const int64_t distinct = std::count(touched.begin(), touched.end(), true);
      auto d_x = device_copy(to_dtype<T>(random_activations<T>(M, H, 1.0f, rng)));
      auto d_ids = device_copy(ids);
      auto d_w = device_copy(weights);
      auto d_map = device_copy(map);
      DeviceBuffer d_counts(E * 4), d_offsets((E + 1) * 4), d_p2r(pairs * 4), d_r2p(pairs * 4),
          d_h(cuda::wna16_expert_mlp_scratch_bytes(pairs, I, sizeof(T))),
          d_y(pairs * H * sizeof(T)), d_out(M * H * sizeof(T));
      cuda::MoEAlignment align;
      align.expert_counts = d_counts.as<int32_t>();
      align.expert_offsets = d_offsets.as<int32_t>();
      align.pair_to_row = d_p2r.as<int32_t>();
      align.row_to_pair = d_r2p.as<int32_t>();
      cuda::Wna16ExpertMlpArgs args;
      args.x = d_x->as<void>();
      args.row_to_pair = align.row_to_pair;
      args.top_k = top_k;
      args.expert_offsets = align.expert_offsets;
      args.num_experts = E;
      args.max_rows = pairs;
      args.hidden = H;
      args.inter = I;
      args.w13 = w13.view;
      args.w2 = w2.view;
      args.h = d_h.as<void>();
      args.out = d_y.as<void>();
      for (const Wna16GemmKernel kernel : cuda::kAllWna16GemmKernels) {
        // Timed as a replayed CUDA graph (as a decode step runs), so host launch costs are out.
        cudaStream_t stream;
        MG_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
        const auto run = [&](cudaStream_t s) {
          cuda::launch_moe_align(d_ids->as<int32_t>(), pairs, d_map->as<int32_t>(), E, E, align, s);
          cuda::launch_wna16_expert_mlp<T>(args, kernel, s);
          cuda::launch_moe_combine<T>(d_y.as<void>(), align, d_ids->as<int32_t>(), d_w->as<float>(),
                                      d_map->as<int32_t>(), nullptr, M, top_k, H, d_out.as<void>(),
                                      s);
        };
        run(stream);
        cudaGraph_t graph;
        cudaGraphExec_t exec;
        MG_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
        run(stream);
        MG_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
        MG_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
        for (int i = 0; i < 5; ++i) MG_CUDA_CHECK(cudaGraphLaunch(exec, stream));
        cudaEvent_t start, stop;
        MG_CUDA_CHECK(cudaEventCreate(&start));
        MG_CUDA_CHECK(cudaEventCreate(&stop));
        const int iters = 100;
        MG_CUDA_CHECK(cudaEventRecord(start, stream));
        for (int i = 0; i < iters; ++i) MG_CUDA_CHECK(cudaGraphLaunch(exec, stream));
        MG_CUDA_CHECK(cudaEventRecord(stop, stream));
        MG_CUDA_CHECK(cudaEventSynchronize(stop));
        float ms = 0.0f;
        MG_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
        MG_CUDA_CHECK(cudaEventDestroy(start));
        MG_CUDA_CHECK(cudaEventDestroy(stop));
        MG_CUDA_CHECK(cudaGraphExecDestroy(exec));
        MG_CUDA_CHECK(cudaGraphDestroy(graph));
        MG_CUDA_CHECK(cudaStreamDestroy(stream));
        const double us = 1000.0 * ms / iters;
        const double floor_us = distinct * (w13_bytes + w2_bytes) / 3.35e6;
        std::cout << fmt::format(
            "wna16 int{} group {:>4} {:<11} M {:>3} experts {:>2}: {:8.1f} us, floor "
            "{:6.1f} us ({:4.0f}% of the packed-bytes floor)\n",
            bits, group, cuda::wna16_gemm_kernel_name(kernel), M, distinct, us, floor_us,
            100.0 * floor_us / us);
      }
    }
  }
}

// Where kWna16DequantMinRowsPerExpert should sit: the qwen3-30b-a3b INT4 g128 layer (E 128, H 2048,
// I 768, top 8) at M = 256, 1024 and 4096 tokens through
//   mma      align -> WNA16 mma.sync GEMM1 + act, GEMM2 (the tile chosen) -> combine
//   dequant  align -> gather -> per chunk: dequantize + BF16 grouped GEMMs -> combine (the path
//            the backends take from kWna16DequantMinRowsPerExpert rows an expert on; 2 chunks of 64
//            experts)
//   bf16     align -> gather -> BF16 grouped GEMMs -> combine over dense weights (cuda_moe's
//            pipeline; the same weights, dequantized once before timing)
// and the dequantization of all 128 experts alone; the dequant path also with budgets of 256 and
// 40 MiB (kWna16DequantBudgetBytes is 1 GiB). Replayed CUDA graphs. Run on an H100 with
//   MG_WNA16_TIMING=1 build/tests/mg_cuda_tests --gtest_filter='CudaWna16Experts.TimingDequant*'
TEST(CudaWna16Experts, TimingDequantQwen3Shape) {
  MG_REQUIRE_GPU();
  if (std::getenv("MG_WNA16_TIMING") == nullptr) GTEST_SKIP() << "set MG_WNA16_TIMING=1 to time";
  using T = __nv_bfloat16;
  const int64_t E = 128, H = 2048, I = 768, top_k = 8;
  const int bits = 4;
  const int64_t group = 128;
  std::mt19937 rng(7);
  const auto matrix = [&](int64_t rows, int64_t cols, int64_t parts) {
    const cuda::Wna16PackedHost p = cuda::wna16_layout(E, rows, cols, bits, group, parts);
    QuantMatrix m;
    m.words = std::make_unique<DeviceBuffer>(p.word_count() * 4);
    m.params = std::make_unique<DeviceBuffer>(p.param_count() * 4);
    cuda::launch_wna16_random_fill(m.words->as<uint32_t>(), p.word_count(), m.params->as<float>(),
                                   p.param_count(), bits, 0.01f, static_cast<uint64_t>(rows),
                                   nullptr);
    m.view = cuda::wna16_weights_view(p, m.words->as<uint32_t>(), m.params->as<float>());
    return m;
  };
  const QuantMatrix w13 = matrix(2 * I, H, 2), w2 = matrix(H, I, 1);
  // The dense BF16 weights of the bf16 pipeline: every expert dequantized once.
  DeviceBuffer d_w13(E * 2 * I * H * sizeof(T)), d_w2(E * H * I * sizeof(T));
  const auto dequantize_all = [&](cudaStream_t s) {
    cuda::Wna16DequantArgs a;
    a.w = w13.view;
    a.expert_count = E;
    a.n = I;
    a.k = H;
    a.out = d_w13.as<void>();
    cuda::launch_wna16_dequantize<T>(a, s);
    a.w = w2.view;
    a.n = H;
    a.k = I;
    a.out = d_w2.as<void>();
    cuda::launch_wna16_dequantize<T>(a, s);
  };
  dequantize_all(nullptr);
  MG_CUDA_CHECK(cudaDeviceSynchronize());
  const double all_us = testing::graph_replay_us(dequantize_all, 20, 5);
  std::cout << fmt::format(
      "dequantize all {} experts (int4 g128 -> BF16, {:.0f} MB written): {:8.1f} us\n", E,
      static_cast<double>(E * 3 * I * H * sizeof(T)) / 1e6, all_us);

  const CudaMoEProblem problem{E, H, I, top_k, true, DType::kBF16};
  const CudaDeviceTraits traits = cuda_device_traits(Device::cuda(0));
  for (const int64_t M : {int64_t{256}, int64_t{1024}, int64_t{4096}}) {
    const int64_t pairs = M * top_k;
    std::vector<int32_t> ids(pairs), map(E);
    std::vector<float> weights(pairs, 0.125f);
    for (int64_t e = 0; e < E; ++e) map[e] = static_cast<int32_t>(e);
    for (int64_t t = 0; t < M; ++t) {
      std::vector<int32_t> perm(E);
      for (int64_t e = 0; e < E; ++e) perm[e] = static_cast<int32_t>(e);
      std::shuffle(perm.begin(), perm.end(), rng);
      for (int64_t j = 0; j < top_k; ++j) ids[t * top_k + j] = perm[j];
    }
    auto d_x = device_copy(to_dtype<T>(random_activations<T>(M, H, 1.0f, rng)));
    auto d_ids = device_copy(ids);
    auto d_w = device_copy(weights);
    auto d_map = device_copy(map);
    DeviceBuffer d_counts(E * 4), d_offsets((E + 1) * 4), d_p2r(pairs * 4), d_r2p(pairs * 4),
        d_h(cuda::wna16_expert_mlp_scratch_bytes(pairs, I, sizeof(T))), d_y(pairs * H * sizeof(T)),
        d_out(M * H * sizeof(T)), d_xp(pairs * H * sizeof(T)),
        d_scratch(cuda::wna16_dequant_mlp_scratch_bytes(pairs, E, H, I, true, sizeof(T)));
    cuda::MoEAlignment align;
    align.expert_counts = d_counts.as<int32_t>();
    align.expert_offsets = d_offsets.as<int32_t>();
    align.pair_to_row = d_p2r.as<int32_t>();
    align.row_to_pair = d_r2p.as<int32_t>();
    const cuda::GroupedGemmKernel gemm1 =
        choose_grouped_gemm_kernel(grouped_gemm1(problem, M), traits, nullptr);
    const cuda::GroupedGemmKernel gemm2 =
        choose_grouped_gemm_kernel(grouped_gemm2(problem, M), traits, nullptr);
    const auto align_and_combine = [&](cudaStream_t s, const auto& middle) {
      cuda::launch_moe_align(d_ids->as<int32_t>(), pairs, d_map->as<int32_t>(), E, E, align, s);
      middle(s);
      cuda::launch_moe_combine<T>(d_y.as<void>(), align, d_ids->as<int32_t>(), d_w->as<float>(),
                                  d_map->as<int32_t>(), nullptr, M, top_k, H, d_out.as<void>(), s);
    };

    cuda::Wna16ExpertMlpArgs mma;
    mma.x = d_x->as<void>();
    mma.row_to_pair = align.row_to_pair;
    mma.top_k = top_k;
    mma.expert_offsets = align.expert_offsets;
    mma.num_experts = E;
    mma.max_rows = pairs;
    mma.hidden = H;
    mma.inter = I;
    mma.w13 = w13.view;
    mma.w2 = w2.view;
    mma.h = d_h.as<void>();
    mma.out = d_y.as<void>();
    const Wna16GemmKernel tile = cuda::choose_wna16_gemm_kernel(pairs, E, w13.view.codes);
    const double mma_us = testing::graph_replay_us(
        [&](cudaStream_t s) {
          align_and_combine(
              s, [&](cudaStream_t st) { cuda::launch_wna16_expert_mlp<T>(mma, tile, st); });
        },
        50, 5);

    cuda::Wna16DequantMlpArgs dq;
    dq.x = d_x->as<void>();
    dq.tokens = M;
    dq.top_k = top_k;
    dq.align = align;
    dq.num_experts = E;
    dq.hidden = H;
    dq.inter = I;
    dq.w13 = w13.view;
    dq.w2 = w2.view;
    dq.gemm1 = gemm1;
    dq.gemm2 = gemm2;
    dq.scratch = d_scratch.as<void>();
    dq.h = d_h.as<void>();
    dq.out = d_y.as<void>();
    const double dequant_us = testing::graph_replay_us(
        [&](cudaStream_t s) {
          align_and_combine(
              s, [&](cudaStream_t st) { cuda::launch_wna16_dequant_expert_mlp<T>(dq, st); });
        },
        50, 5);

    const double bf16_us = testing::graph_replay_us(
        [&](cudaStream_t s) {
          align_and_combine(s, [&](cudaStream_t st) {
            cuda::launch_moe_gather<T>(d_x->as<void>(), M, top_k, H, align, d_xp.as<void>(), st);
            cuda::GroupedGemmArgs g1;
            g1.a = d_xp.as<void>();
            g1.b = d_w13.as<void>();
            g1.c = d_h.as<void>();
            g1.expert_offsets = align.expert_offsets;
            g1.num_experts = E;
            g1.max_rows = pairs;
            g1.n = I;
            g1.k = H;
            g1.epilogue = GroupedEpilogue::kActivation;
            cuda::launch_grouped_gemm<T>(g1, gemm1, st);
            cuda::GroupedGemmArgs g2 = g1;
            g2.a = d_h.as<void>();
            g2.b = d_w2.as<void>();
            g2.c = d_y.as<void>();
            g2.n = H;
            g2.k = I;
            g2.epilogue = GroupedEpilogue::kBias;
            cuda::launch_grouped_gemm<T>(g2, gemm2, st);
          });
        },
        50, 5);
    const cuda::Wna16DequantChunks chunks =
        cuda::wna16_dequant_chunks(E, H, I, true, sizeof(T), cuda::kWna16DequantBudgetBytes);
    std::cout << fmt::format(
        "qwen3-30b-a3b int4 g128 M {:>4}: mma ({}) {:8.1f} us, dequant ({} chunks, {}+{}) {:8.1f} "
        "us, bf16 {:8.1f} us (chosen from {} rows an expert)\n",
        M, cuda::wna16_gemm_kernel_name(tile), mma_us, chunks.chunks,
        cuda::grouped_gemm_kernel_name(gemm1), cuda::grouped_gemm_kernel_name(gemm2), dequant_us,
        bf16_us, cuda::kWna16DequantMinRowsPerExpert);
    // Smaller budgets: more, smaller chunks whose dense weights may still be in L2 (50 MB on an
    // H100) when the GEMMs read them, against more launches and GEMMs over fewer experts.
    for (const int64_t budget : {int64_t{256} << 20, int64_t{40} << 20}) {
      dq.budget_bytes = budget;
      const double us = testing::graph_replay_us(
          [&](cudaStream_t s) {
            align_and_combine(
                s, [&](cudaStream_t st) { cuda::launch_wna16_dequant_expert_mlp<T>(dq, st); });
          },
          50, 5);
      std::cout << fmt::format(
          "    dequant with a budget of {:>4} MiB ({:>2} chunks): {:8.1f} us\n", budget >> 20,
          cuda::wna16_dequant_chunks(E, H, I, true, sizeof(T), budget).chunks, us);
    }
  }
}

#endif  // MG_WITH_CUDA

}  // namespace
}  // namespace mg
