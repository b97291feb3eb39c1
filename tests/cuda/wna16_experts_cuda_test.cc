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
// A wrong nibble, a group's scale off by one group or a swapped gate/up moves results by tens of
// percent.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
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
#include "ops/moe/experts/cuda_wna16_experts.h"
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

enum class Zeros { kSymmetric, kF32, kU8 };

const char* zeros_label(Zeros z) {
  switch (z) {
    case Zeros::kSymmetric:
      return "sym";
    case Zeros::kF32:
      return "asym-f32";
    case Zeros::kU8:
      return "asym-u8";
  }
  return "?";
}

// One matrix [E, N, K]: its contract (made by wna16_quantize_host from random weights), the
// reference weights (q - z) * s rounded through T, and the packed copy on the device.
struct QuantMatrix {
  cuda::Wna16HostCodes codes;
  std::vector<uint8_t> zeros_u8;
  std::vector<float> ref;  // [E, N, K] real weights rounded through T
  std::unique_ptr<DeviceBuffer> words, params;
  cuda::Wna16Weights view;
};

template <typename T>
QuantMatrix make_matrix(int64_t experts, int64_t rows, int64_t cols, int bits, int64_t group,
                        Zeros zeros, int64_t parts, std::mt19937& rng) {
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
  m.ref = cuda::wna16_dequantize_host(view);
  for (float& v : m.ref) v = round_to<T>(v);
  const cuda::Wna16PackedHost packed = cuda::wna16_pack(view, parts);
  m.words = device_copy(packed.words);
  m.params = device_copy(packed.params);
  m.view = cuda::wna16_weights_view(packed, m.words->as<uint32_t>(), m.params->as<float>());
  return m;
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
      double g = dot(xr, w.ref.data() + (e * n_b + col) * c.k, c.k);
      double u = c.gated() ? dot(xr, w.ref.data() + (e * n_b + c.n + col) * c.k, c.k) : 0.0;
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
    for (const int64_t group : {int64_t{32}, int64_t{64}, int64_t{128}, int64_t{-1}}) {
      for (const Zeros zeros : {Zeros::kSymmetric, Zeros::kF32, Zeros::kU8}) {
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
  return cases;
}

TEST(CudaWna16Experts, GroupedGemmEveryKernelMatchesReference) {
  MG_REQUIRE_GPU();
  uint32_t seed = 1000;
  const std::vector<GemmCase> cases = gemm_cases();
  ASSERT_GT(cases.size(), 80u);
  for (const GemmCase& c : cases) {
    for (const Wna16GemmKernel kernel : cuda::kAllWna16GemmKernels) {
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
  std::string describe() const {
    return fmt::format("M {} top_k {} E {} H {} I {} int{} group {} {} act {} bias {}", tokens,
                       top_k, experts, hidden, inter, bits, group, zeros_label(zeros),
                       static_cast<int>(kind), bias);
  }
};

template <typename T>
void check_mlp(const MlpCase& c, Wna16GemmKernel kernel, uint32_t seed) {
  SCOPED_TRACE(fmt::format("{} {} {}", dtype_label<T>(), cuda::wna16_gemm_kernel_name(kernel),
                           c.describe()));
  std::mt19937 rng(seed);
  const bool gated = cuda::is_gated(c.kind);
  const int64_t n1 = gated ? 2 * c.inter : c.inter;
  // c.experts local experts out of c.experts + 2 global ones; global ids 1 and 4 are not local.
  const int64_t global = c.experts + 2;
  std::vector<int32_t> expert_map(global);
  for (int64_t g = 0, local = 0; g < global; ++g) {
    expert_map[g] = (g == 1 || g == 4) ? -1 : static_cast<int32_t>(local++);
  }
  const QuantMatrix w13 =
      make_matrix<T>(c.experts, n1, c.hidden, c.bits, c.group, c.zeros, gated ? 2 : 1, rng);
  const QuantMatrix w2 =
      make_matrix<T>(c.experts, c.hidden, c.inter, c.bits, c.group, c.zeros, 1, rng);
  std::uniform_real_distribution<float> bias_value(-0.5f, 0.5f);
  std::vector<float> b13(c.experts * n1), b2(c.experts * c.hidden);
  for (float& b : b13) b = bias_value(rng);
  for (float& b : b2) b = bias_value(rng);
  const std::vector<float> x = random_activations<T>(c.tokens, c.hidden, 1.0f, rng);
  const int64_t pairs = c.tokens * c.top_k;
  std::vector<int32_t> ids(pairs);
  std::vector<float> weights(pairs);
  std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(global - 1));
  std::uniform_real_distribution<float> weight(0.1f, 1.0f);
  for (int64_t i = 0; i < pairs; ++i) {
    ids[i] = pick(rng);
    weights[i] = weight(rng);
  }
  // The last token only routes to experts that are not local: its output must be zero.
  if (c.tokens > 1) {
    for (int64_t j = 0; j < c.top_k; ++j) ids[(c.tokens - 1) * c.top_k + j] = j % 2 ? 1 : 4;
  }

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
  const std::vector<uint8_t> bytes = run_eager_and_graph(
      [&](cudaStream_t s) {
        cuda::launch_moe_align(d_ids->as<int32_t>(), pairs, d_map->as<int32_t>(), global, c.experts,
                               align, s);
        cuda::launch_wna16_expert_mlp<T>(args, kernel, s);
        cuda::launch_moe_combine<T>(d_y.as<void>(), align, d_ids->as<int32_t>(), d_w->as<float>(),
                                    d_map->as<int32_t>(), nullptr, c.tokens, c.top_k, c.hidden,
                                    d_out.as<void>(), s);
      },
      d_out, out_bytes);
  std::vector<T> out(c.tokens * c.hidden);
  std::memcpy(out.data(), bytes.data(), out_bytes);

  std::vector<double> got, ref;
  std::vector<float> h(c.inter);
  MoEActParams act;
  act.kind = c.kind;
  for (int64_t t = 0; t < c.tokens; ++t) {
    std::vector<double> sum(c.hidden, 0.0);
    const float* xr = x.data() + t * c.hidden;
    for (int64_t j = 0; j < c.top_k; ++j) {
      const int32_t e = expert_map[ids[t * c.top_k + j]];
      if (e < 0) continue;
      for (int64_t i = 0; i < c.inter; ++i) {
        double g = dot(xr, w13.ref.data() + (e * n1 + i) * c.hidden, c.hidden);
        double u =
            gated ? dot(xr, w13.ref.data() + (e * n1 + c.inter + i) * c.hidden, c.hidden) : 0.0;
        if (c.bias) {
          g += b13[e * n1 + i];
          if (gated) u += b13[e * n1 + c.inter + i];
        }
        h[i] = round_to<T>(reference_activation(act, g, u));
      }
      for (int64_t col = 0; col < c.hidden; ++col) {
        double y = dot(h.data(), w2.ref.data() + (e * c.hidden + col) * c.inter, c.inter);
        if (c.bias) y += b2[e * c.hidden + col];
        sum[col] += weights[t * c.top_k + j] * round_to<T>(y);
      }
    }
    for (int64_t col = 0; col < c.hidden; ++col) {
      ref.push_back(sum[col]);
      got.push_back(to_f32(out[t * c.hidden + col]));
    }
  }
  if (c.tokens > 1) {
    for (int64_t col = 0; col < c.hidden; ++col) {
      ASSERT_EQ(got[(c.tokens - 1) * c.hidden + col], 0.0) << "a token without local experts";
    }
  }
  // The intermediate h is rounded to T by both; one ulp apart across a rounding boundary is
  // possible, so the bounds are looser than one GEMM's (as the FP8 MLP test's).
  const std::string why = compare_bounded(got, ref, 1.0 / 64, 1.0 / 64, 1e-2);
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
        c.zeros = index % 3 == 0 ? Zeros::kSymmetric : index % 3 == 1 ? Zeros::kF32 : Zeros::kU8;
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
    for (const Wna16GemmKernel kernel : cuda::kAllWna16GemmKernels) {
      for_each_dtype([&]<typename T>() { check_mlp<T>(c, kernel, ++seed); });
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
// the kernel chosen (the decode path at M <= 8), the decode path forced (`wna16_decode`, up to 16
// tokens) and both GEMM tiles forced.
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
        for (const char* kernel : {"auto", "wna16_decode", "wna16_mma16", "wna16_mma64"}) {
          for (const int64_t M : {int64_t{1}, int64_t{5}, int64_t{300}}) {
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
    for (const Wna16GemmKernel kernel : cuda::kAllWna16GemmKernels) {
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

#endif  // MG_WITH_CUDA

}  // namespace
}  // namespace mg
