// The FP8 (W8A8 block-scaled) expert kernels (ops/moe/cuda/fp8/fp8_experts_cuda.h) against host
// references built on framework/core/fp8.h, in BF16 and F16:
// - the activation quantisation (fused with the row gather), per 128 group and per token, must
//   give quantize_fp8_e4m3_group's codes and scales bit for bit, zero groups, subnormal codes and
//   partial groups included;
// - the grouped GEMM, every kernel variant forced, both epilogues, every scale layout (128 x 128
//   blocks, per tensor, per channel), against an fp64 loop over the same codes and scales;
// - the expert MLP (quantise-gather, GEMM1 + act, quantise, GEMM2) and the decode path against an
//   fp64 emulation of the same pipeline, and both replayed from a CUDA graph.
// Shapes: odd expert counts, experts with no rows, 1 to 300 rows, N and K of 128, 256, 448
// (384 + 64: partial 128 blocks) and K 48 (a multiple of 16 below 128). MG_TEST_DTYPES=bf16 runs
// the BF16 half only (as the other CUDA tests, for compute-sanitizer runs).
//
// Tolerances of the GEMMs. The reference sums the exact products of the same e4m3 codes in fp64;
// the kernel sums them on the tensor cores within one 128-K block (products of two e4m3 values are
// exact; the FP8 MMA accumulation keeps at least ~14 bits of the block's partial sum) and then in
// fp32 (~2^-24 per add), and rounds the result once to BF16 (half an ulp: up to 2^-9 relative) or
// F16 (2^-11). So an element may be off by ~2^-9 |ref| (BF16) plus noise far below it; the bound
// used is 2^-8 |ref| (F16: 2^-10) plus 2^-10 of the output's RMS (for elements near zero, where
// relative error is meaningless), and the normalised L2 error must stay under 4e-3 (F16: 1e-3),
// about twice what the output rounding alone gives. A wrong scale (a block off by one, a transposed
// index) moves the result by tens of percent; a skipped K block by ~1/ceil(K/128).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "framework/core/fp8.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/cuda/moe_kernel_test_util.h"

#ifdef MG_WITH_CUDA
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include "ops/moe/cuda/fp8/fp8_experts_cuda.h"
#endif

namespace mg {
namespace {

#ifdef MG_WITH_CUDA

using cuda::Fp8GemmKernel;
using cuda::GroupedEpilogue;
using cuda::MoEActKind;
using cuda::MoEActParams;
using testing::compare_bounded;
using testing::DeviceBuffer;
using testing::reference_activation;
using testing::run_eager_and_graph;

constexpr MoEActKind kAllKinds[] = {MoEActKind::kSiluGated,     MoEActKind::kGeluGated,
                                    MoEActKind::kGeluTanhGated, MoEActKind::kSwigluOai,
                                    MoEActKind::kReluSquared,   MoEActKind::kSilu,
                                    MoEActKind::kGelu};

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
// Calls f.template operator()<T>() for T = BF16 and F16, or those of them MG_TEST_DTYPES names
// (testing::cuda_dtypes; e.g. bf16 alone under compute-sanitizer).
template <typename F>
void for_each_dtype(const F& f) {
  for (const testing::DtypeTolerance& d : testing::cuda_dtypes()) {
    if (d.dtype == DType::kBF16) f.template operator()<__nv_bfloat16>();
    if (d.dtype == DType::kF16) f.template operator()<__half>();
  }
}

template <typename T>
const char* dtype_label() {
  return std::is_same_v<T, __half> ? "F16" : "BF16";
}

const std::vector<double>& e4m3_values() {
  static const std::vector<double> table = [] {
    std::vector<double> t(256);
    for (int c = 0; c < 256; ++c) t[c] = fp8_e4m3_to_float(static_cast<uint8_t>(c));
    return t;
  }();
  return table;
}

// Activation rows quantised on the host: codes [rows, K], scales [rows, cols] with one column per
// 128 group (cols = groups), or one per row (per token: cols = 1).
struct QuantRows {
  int64_t rows = 0, k = 0, groups = 0, cols = 0;
  std::vector<uint8_t> q;
  std::vector<float> s;
  // The scale of row `row`'s 128 group `g`.
  float scale(int64_t row, int64_t g) const { return s[row * cols + (cols == 1 ? 0 : g)]; }
};

QuantRows quantize_rows(const std::vector<float>& x, int64_t rows, int64_t k,
                        bool per_token = false) {
  QuantRows r;
  r.rows = rows;
  r.k = k;
  r.groups = cuda::fp8_groups(k);
  r.cols = cuda::fp8_act_scale_cols(k, per_token);
  const int64_t width = per_token ? k : 128;
  r.q.resize(rows * k);
  r.s.resize(rows * r.cols);
  for (int64_t row = 0; row < rows; ++row) {
    for (int64_t g = 0; g < r.cols; ++g) {
      const int64_t k0 = g * width, len = std::min<int64_t>(width, k - k0);
      r.s[row * r.cols + g] =
          quantize_fp8_e4m3_group(x.data() + row * k + k0, len, r.q.data() + row * k + k0);
    }
  }
  return r;
}

// Rows quantised with a static scale (per-token layout, one column): e4m3(clamp(x / scale, ±448)).
QuantRows quantize_rows_static(const std::vector<float>& x, int64_t rows, int64_t k, float scale) {
  QuantRows r;
  r.rows = rows;
  r.k = k;
  r.groups = cuda::fp8_groups(k);
  r.cols = 1;
  r.q.resize(rows * k);
  r.s.assign(rows, scale);
  for (int64_t i = 0; i < rows * k; ++i) {
    r.q[i] = float_to_fp8_e4m3(std::clamp(x[i] / scale, -kFp8E4M3Max, kFp8E4M3Max));
  }
  return r;
}

enum class ScaleKind { kBlock, kTensor, kChannel };

const char* scale_kind_name(ScaleKind s) {
  switch (s) {
    case ScaleKind::kBlock:
      return "block128";
    case ScaleKind::kTensor:
      return "tensor";
    case ScaleKind::kChannel:
      return "channel";
  }
  return "?";
}

// FP8 weights W [E, N, K] with their scales, random codes (no NaN) and positive scales.
struct Fp8Weights {
  int64_t experts = 0, n = 0, k = 0, block_n = 0, block_k = 0, s_rows = 0, s_cols = 0;
  std::vector<uint8_t> codes;
  std::vector<float> scales;

  double scale(int64_t e, int64_t row, int64_t col) const {
    return scales[(e * s_rows + row / block_n) * s_cols + col / block_k];
  }
};

Fp8Weights random_weights(int64_t experts, int64_t n, int64_t k, ScaleKind kind,
                          std::mt19937& rng) {
  Fp8Weights w;
  w.experts = experts;
  w.n = n;
  w.k = k;
  switch (kind) {
    case ScaleKind::kBlock:
      w.block_n = 128;
      w.block_k = 128;
      break;
    case ScaleKind::kTensor:
      w.block_n = n;
      w.block_k = k;
      break;
    case ScaleKind::kChannel:
      w.block_n = 1;
      w.block_k = k;
      break;
  }
  w.s_rows = (n + w.block_n - 1) / w.block_n;
  w.s_cols = (k + w.block_k - 1) / w.block_k;
  std::uniform_real_distribution<float> code_value(-448.0f, 448.0f);
  w.codes.resize(experts * n * k);
  for (uint8_t& c : w.codes) c = float_to_fp8_e4m3(code_value(rng));
  // Weights of RMS ~ 1 / sqrt(K) in real value, each block's scale different.
  std::uniform_real_distribution<float> spread(0.5f, 1.5f);
  const float base = 1.0f / (256.0f * std::sqrt(static_cast<float>(k)));
  w.scales.resize(experts * w.s_rows * w.s_cols);
  for (float& s : w.scales) s = base * spread(rng);
  return w;
}

cuda::Fp8WeightScales scales_of(const Fp8Weights& w, const DeviceBuffer& d) {
  cuda::Fp8WeightScales s;
  s.scales = d.as<float>();
  s.block_n = w.block_n;
  s.block_k = w.block_k;
  return s;
}

// Σ_kb (Σ_{k in kb} xq wq) xs[kb] S[e, n / bn, kb*128 / bk] in fp64; with `absolute`, the same
// over the products' magnitudes (what an accumulation error is relative to).
double block_scaled_dot(const QuantRows& x, int64_t row, const Fp8Weights& w, int64_t e,
                        int64_t wrow, bool absolute = false) {
  const auto& v = e4m3_values();
  double sum = 0.0;
  for (int64_t g = 0; g < x.groups; ++g) {
    const int64_t k0 = g * 128, k1 = std::min<int64_t>(x.k, k0 + 128);
    double block = 0.0;
    for (int64_t kk = k0; kk < k1; ++kk) {
      const double product = v[x.q[row * x.k + kk]] * v[w.codes[(e * w.n + wrow) * w.k + kk]];
      block += absolute ? std::fabs(product) : product;
    }
    const double scale = x.scale(row, g) * w.scale(e, wrow, k0);
    sum += block * (absolute ? std::fabs(scale) : scale);
  }
  return sum;
}

// The accumulation error fp8_wgmma may add, relative to block_scaled_dot(..., absolute = true).
// Hopper's FP8 wgmma does not accumulate in full fp32 inside a chain of k32 steps (DeepSeek-V3's
// report measures ~14 bits kept; that is why the kernels promote every 128-K block into fp32), so
// within a block its partial sum may be off by ~2^-14 of the products' magnitude per step, where
// mma.sync's m16n8k32 rounds each step into fp32. 2^-11 of the magnitude sum covers a 128-wide
// block's four steps with margin and stays far below what a wrong scale, a skipped K block or a
// stale tile moves (tens of percent of the value, i.e. several times the magnitude sum / 16).
constexpr double kWgmmaAccumulation = 1.0 / 2048;

// An allowance per element for an activation of gate g (error bound dg) and up u (du): the
// activations' derivatives are bounded by ~1.1 (silu, gelu, swiglu's g sigmoid(alpha g)) times
// the other input, and relu^2's by 2|g|.
double activation_allowance(double g, double u, double dg, double du) {
  return (dg + du) * (2.0 + 2.0 * std::fabs(g) + 2.0 * std::fabs(u));
}

// Random activations (never zero), rounded through T.
template <typename T>
std::vector<float> random_activations(int64_t rows, int64_t k, float range, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(0.05f, 1.0f);
  std::bernoulli_distribution negative(0.5);
  std::vector<float> x(rows * k);
  for (float& v : x) v = round_to<T>((negative(rng) ? -range : range) * u(rng));
  return x;
}

template <typename T>
std::vector<T> to_dtype(const std::vector<float>& x) {
  std::vector<T> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = from_f32<T>(x[i]);
  return out;
}

template <typename V>
void upload(DeviceBuffer& d, const std::vector<V>& v) {
  d.upload(v.data(), v.size() * sizeof(V));
}

template <typename T>
struct Bounds {
  static constexpr double kRel = std::is_same_v<T, __half> ? 1.0 / 1024 : 1.0 / 256;
  static constexpr double kAbs = 1.0 / 1024;
  static constexpr double kL2 = std::is_same_v<T, __half> ? 1e-3 : 4e-3;
};

// ---- 1. Quantisation -----------------------------------------------------------------------

// Rows of x with hard groups: all zero (scale = 1e-10 / 448, zero codes), tiny values (subnormal
// codes), large values, a single non-zero element, and values whose x / scale lands near 448.
template <typename T>
std::vector<float> quant_inputs(int64_t rows, int64_t k, std::mt19937& rng) {
  std::vector<float> x = random_activations<T>(rows, k, 3.0f, rng);
  const int64_t groups = cuda::fp8_groups(k);
  for (int64_t row = 0; row < rows; ++row) {
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t k0 = g * 128, len = std::min<int64_t>(128, k - k0);
      float* v = x.data() + row * k + k0;
      switch ((row * groups + g) % 7) {
        case 0:
          std::fill(v, v + len, 0.0f);
          break;
        case 1:
          for (int64_t i = 0; i < len; ++i) v[i] = round_to<T>(v[i] * 1e-4f);
          if (len > 1) v[0] = round_to<T>(40.0f);  // the rest quantise to subnormal codes
          break;
        case 2:
          for (int64_t i = 0; i < len; ++i) v[i] = round_to<T>(v[i] * 5000.0f);
          break;
        case 3:
          std::fill(v, v + len, 0.0f);
          v[len - 1] = round_to<T>(-0.75f);
          break;
        default:
          break;
      }
    }
  }
  return x;
}

template <typename T>
void check_quantize(int64_t tokens, int64_t top_k, int64_t k, bool gather, bool per_token,
                    uint32_t seed) {
  SCOPED_TRACE(fmt::format("{} tokens {} top_k {} K {} gather {} per_token {}", dtype_label<T>(),
                           tokens, top_k, k, gather, per_token));
  std::mt19937 rng(seed);
  const int64_t max_rows = gather ? tokens * top_k : tokens;
  const int64_t groups = cuda::fp8_act_scale_cols(k, per_token);  // scale columns
  const int64_t width = per_token ? k : 128;                      // channels per group
  const std::vector<float> x = quant_inputs<T>(tokens, k, rng);
  // A permutation of the pairs, and fewer rows written than allocated.
  std::vector<int32_t> row_to_pair(max_rows);
  std::iota(row_to_pair.begin(), row_to_pair.end(), 0);
  std::shuffle(row_to_pair.begin(), row_to_pair.end(), rng);
  const int32_t num_rows = static_cast<int32_t>(gather ? max_rows - max_rows / 4 : max_rows);

  DeviceBuffer d_x(x.size() * sizeof(T)), d_map(row_to_pair.size() * 4), d_rows(4);
  DeviceBuffer d_q(max_rows * k), d_s(max_rows * groups * 4);
  upload(d_x, to_dtype<T>(x));
  upload(d_map, row_to_pair);
  d_rows.upload(&num_rows, 4);
  MG_CUDA_CHECK(cudaMemset(d_q.as<void>(), 0xab, max_rows * k));
  MG_CUDA_CHECK(cudaMemset(d_s.as<void>(), 0xab, max_rows * groups * 4));

  cuda::Fp8QuantArgs args;
  args.x = d_x.as<void>();
  args.row_to_pair = gather ? d_map.as<int32_t>() : nullptr;
  args.top_k = gather ? top_k : 1;
  args.num_rows = gather ? d_rows.as<int32_t>() : nullptr;
  args.max_rows = max_rows;
  args.k = k;
  args.per_token = per_token;
  args.xq = d_q.as<uint8_t>();
  args.xs = d_s.as<float>();
  cuda::launch_fp8_quantize<T>(args, nullptr);
  MG_CUDA_CHECK(cudaDeviceSynchronize());

  std::vector<uint8_t> q(max_rows * k);
  std::vector<float> s(max_rows * groups);
  d_q.download(q.data(), q.size());
  d_s.download(s.data(), s.size() * 4);

  int mismatches = 0;
  for (int64_t row = 0; row < max_rows; ++row) {
    if (row >= num_rows) {
      for (int64_t i = 0; i < k; ++i) ASSERT_EQ(q[row * k + i], 0xab) << "row " << row;
      uint32_t bits;
      std::memcpy(&bits, &s[row * groups], 4);
      ASSERT_EQ(bits, 0xababababu) << "row " << row << " past num_rows was written";
      continue;
    }
    const int64_t src = gather ? row_to_pair[row] / top_k : row;
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t k0 = g * width, len = std::min<int64_t>(width, k - k0);
      std::vector<uint8_t> want(len);
      const float want_scale = quantize_fp8_e4m3_group(x.data() + src * k + k0, len, want.data());
      uint32_t got_bits, want_bits;
      std::memcpy(&got_bits, &s[row * groups + g], 4);
      std::memcpy(&want_bits, &want_scale, 4);
      if (got_bits != want_bits && mismatches++ < 5) {
        ADD_FAILURE() << "row " << row << " group " << g << ": scale " << s[row * groups + g]
                      << " want " << want_scale;
      }
      for (int64_t i = 0; i < len; ++i) {
        if (q[row * k + k0 + i] != want[i] && mismatches++ < 5) {
          ADD_FAILURE() << "row " << row << " k " << k0 + i << ": code "
                        << static_cast<int>(q[row * k + k0 + i]) << " want "
                        << static_cast<int>(want[i]) << " (x " << x[src * k + k0 + i] << ")";
        }
      }
    }
  }
  EXPECT_EQ(mismatches, 0);
}

// A static scale: codes e4m3(clamp(x / scale, ±448)) (the large groups saturate), every row's
// scale the static one, rows gathered through a permutation.
template <typename T>
void check_quantize_static(int64_t tokens, int64_t top_k, int64_t k, float scale, uint32_t seed) {
  SCOPED_TRACE(fmt::format("{} static scale {} K {}", dtype_label<T>(), scale, k));
  std::mt19937 rng(seed);
  const int64_t rows = tokens * top_k;
  const std::vector<float> x = quant_inputs<T>(tokens, k, rng);
  std::vector<int32_t> row_to_pair(rows);
  std::iota(row_to_pair.begin(), row_to_pair.end(), 0);
  std::shuffle(row_to_pair.begin(), row_to_pair.end(), rng);
  DeviceBuffer d_x(x.size() * sizeof(T)), d_map(rows * 4), d_scale(4), d_q(rows * k), d_s(rows * 4);
  upload(d_x, to_dtype<T>(x));
  upload(d_map, row_to_pair);
  d_scale.upload(&scale, 4);
  cuda::Fp8QuantArgs args;
  args.x = d_x.as<void>();
  args.row_to_pair = d_map.as<int32_t>();
  args.top_k = top_k;
  args.max_rows = rows;
  args.k = k;
  args.per_token = true;
  args.static_scale = d_scale.as<float>();
  args.xq = d_q.as<uint8_t>();
  args.xs = d_s.as<float>();
  cuda::launch_fp8_quantize<T>(args, nullptr);
  MG_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<uint8_t> q(rows * k);
  std::vector<float> s(rows);
  d_q.download(q.data(), q.size());
  d_s.download(s.data(), s.size() * 4);
  std::vector<float> gathered(rows * k);
  for (int64_t r = 0; r < rows; ++r) {
    std::copy_n(x.data() + (row_to_pair[r] / top_k) * k, k, gathered.data() + r * k);
  }
  const QuantRows want = quantize_rows_static(gathered, rows, k, scale);
  EXPECT_EQ(q, want.q);
  EXPECT_EQ(std::memcmp(s.data(), want.s.data(), rows * 4), 0);
  // The static path must not silently be the dynamic one: some codes saturated.
  EXPECT_NE(std::count(q.begin(), q.end(), uint8_t{0x7e}), 0);
}

TEST(CudaFp8Experts, QuantizeMatchesHostBitForBit) {
  MG_REQUIRE_GPU();
  uint32_t seed = 100;
  // 16: one lane's 8 elements a row; 2320: three rounds of the group kernel's four 256-element
  // chunks, the last ending 16 into a group.
  for (const int64_t k : {16, 48, 128, 256, 448, 1040, 2320}) {
    for (const bool gather : {false, true}) {
      for (const bool per_token : {false, true}) {
        for_each_dtype(
            [&]<typename T>() { check_quantize<T>(37, 3, k, gather, per_token, ++seed); });
      }
    }
  }
  check_quantize<__nv_bfloat16>(2, 2, 7168, true, false, ++seed);
  check_quantize<__nv_bfloat16>(2, 2, 7168, true, true, ++seed);
  for (const int64_t k : {48, 448}) {
    for_each_dtype([&]<typename T>() { check_quantize_static<T>(11, 2, k, 0.01f, ++seed); });
  }
}

// Every third BF16 value from 2^-31 to 2^17, each with a negative neighbour, in order: a 128 group
// spans about 1.5 binades, so the codes run through the e4m3 normals, subnormals and ties of many
// scales.
TEST(CudaFp8Experts, QuantizeMatchesHostOnDenseValues) {
  MG_REQUIRE_GPU();
  std::vector<float> values;
  for (uint32_t bits = 0x3000; bits < 0x4800; bits += 3) {  // bf16 2^-31 .. 2^17
    float f;
    const uint32_t word = bits << 16;
    std::memcpy(&f, &word, 4);
    values.push_back(f);
    values.push_back(-f * 0.75f);
  }
  const int64_t k = 256;
  const int64_t rows = (static_cast<int64_t>(values.size()) + k - 1) / k;
  std::vector<float> x(rows * k, 1.0f);
  for (size_t i = 0; i < values.size(); ++i) x[i] = round_to<__nv_bfloat16>(values[i]);
  const QuantRows want = quantize_rows(x, rows, k);

  DeviceBuffer d_x(x.size() * 2), d_q(rows * k), d_s(rows * 2 * 4);
  upload(d_x, to_dtype<__nv_bfloat16>(x));
  cuda::Fp8QuantArgs args;
  args.x = d_x.as<void>();
  args.max_rows = rows;
  args.k = k;
  args.xq = d_q.as<uint8_t>();
  args.xs = d_s.as<float>();
  cuda::launch_fp8_quantize<__nv_bfloat16>(args, nullptr);
  MG_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<uint8_t> q(rows * k);
  std::vector<float> s(rows * 2);
  d_q.download(q.data(), q.size());
  d_s.download(s.data(), s.size() * 4);
  EXPECT_EQ(q, want.q);
  EXPECT_EQ(std::memcmp(s.data(), want.s.data(), s.size() * 4), 0);
}

// ---- 2. Grouped GEMM -----------------------------------------------------------------------

struct GemmCase {
  std::vector<int32_t> rows_per_expert;
  int32_t first_row = 0;   // offsets[0]
  int64_t extra_rows = 0;  // rows after offsets[E] that must stay untouched
  int64_t n = 0, k = 0;
  GroupedEpilogue epilogue = GroupedEpilogue::kBias;
  MoEActKind kind = MoEActKind::kSiluGated;
  bool bias = false;
  ScaleKind scales = ScaleKind::kBlock;
  bool per_token = false;  // activation scales per token, else per 128 group

  bool gated() const { return epilogue == GroupedEpilogue::kActivation && cuda::is_gated(kind); }
  std::string describe() const {
    std::string counts;
    for (int32_t r : rows_per_expert) counts += std::to_string(r) + " ";
    return fmt::format(
        "rows [{}] first {} extra {} N {} K {} epilogue {} act {} bias {} scales {} per_token {}",
        counts, first_row, extra_rows, n, k, static_cast<int>(epilogue), static_cast<int>(kind),
        bias, scale_kind_name(scales), per_token);
  }
};

// Whether `kernel` can run on this GPU and build (fp8_wgmma needs the sm_90a code); where it
// cannot, its launcher must refuse it with an error.
bool runs_here(Fp8GemmKernel kernel) {
  return cuda::fp8_gemm_kernel_check(kernel, cuda::grouped_gemm_sm90a_kernels()).empty();
}

// The expert offsets of a case: offsets[0] = first_row, then the rows of each expert.
std::vector<int32_t> case_offsets(const GemmCase& c) {
  const int64_t experts = static_cast<int64_t>(c.rows_per_expert.size());
  std::vector<int32_t> offsets(experts + 1, c.first_row);
  for (int64_t e = 0; e < experts; ++e) offsets[e + 1] = offsets[e] + c.rows_per_expert[e];
  return offsets;
}

// Runs the grouped GEMM of `c` on `kernel` over the given codes, scales and bias (F32 [E, N_b]),
// output pre-filled with 0xff bytes. False (after checking that the launcher refuses it) when the
// kernel cannot run here.
template <typename T>
bool run_gemm(const GemmCase& c, const QuantRows& a, const Fp8Weights& w,
              const std::vector<float>& bias, Fp8GemmKernel kernel, std::vector<T>& out) {
  const std::vector<int32_t> offsets = case_offsets(c);
  const int64_t experts = static_cast<int64_t>(c.rows_per_expert.size());
  const int64_t max_rows = offsets[experts] + c.extra_rows;
  DeviceBuffer d_a(a.q.size()), d_as(a.s.size() * 4), d_b(w.codes.size()),
      d_bs(w.scales.size() * 4), d_bias(bias.size() * 4), d_c(max_rows * c.n * sizeof(T)),
      d_offsets(offsets.size() * 4);
  upload(d_a, a.q);
  upload(d_as, a.s);
  upload(d_b, w.codes);
  upload(d_bs, w.scales);
  upload(d_bias, bias);
  upload(d_offsets, offsets);
  MG_CUDA_CHECK(cudaMemset(d_c.as<void>(), 0xff, max_rows * c.n * sizeof(T)));

  cuda::Fp8GemmArgs args;
  args.a = d_a.as<uint8_t>();
  args.a_scales = d_as.as<float>();
  args.a_per_token = c.per_token;
  args.b = d_b.as<uint8_t>();
  args.b_scales = scales_of(w, d_bs);
  args.bias = c.bias ? d_bias.as<float>() : nullptr;
  args.c = d_c.as<void>();
  args.expert_offsets = d_offsets.as<int32_t>();
  args.num_experts = experts;
  args.max_rows = max_rows;
  args.n = c.n;
  args.k = c.k;
  args.epilogue = c.epilogue;
  args.act.kind = c.kind;
  const bool tma_shape =
      cuda::fp8_tma_shape_check(c.n, c.k, max_rows, experts, args.b_scales.block_n,
                                args.b_scales.block_k, c.gated())
          .empty();
  if (!runs_here(kernel) || (cuda::is_fp8_tma_kernel(kernel) && !tma_shape)) {
    if (max_rows > 0) {
      EXPECT_THROW(cuda::launch_fp8_grouped_gemm<T>(args, kernel, nullptr), Error);
    }
    return false;
  }
  cuda::launch_fp8_grouped_gemm<T>(args, kernel, nullptr);
  MG_CUDA_CHECK(cudaDeviceSynchronize());
  out.resize(max_rows * c.n);
  d_c.download(out.data(), out.size() * sizeof(T));
  return true;
}

// The expert of `row` (-1: outside every expert's rows).
int64_t expert_of_row(const std::vector<int32_t>& offsets, int64_t row) {
  for (size_t x = 0; x + 1 < offsets.size(); ++x) {
    if (row >= offsets[x] && row < offsets[x + 1]) return static_cast<int64_t>(x);
  }
  return -1;
}

// Whether every element of rows outside the experts' rows still holds the 0xff fill.
template <typename T>
bool rows_outside_untouched(const GemmCase& c, const std::vector<T>& out) {
  const std::vector<int32_t> offsets = case_offsets(c);
  std::vector<uint16_t> bits(out.size());
  std::memcpy(bits.data(), out.data(), out.size() * sizeof(T));
  const int64_t rows = static_cast<int64_t>(out.size()) / c.n;
  for (int64_t row = 0; row < rows; ++row) {
    if (expert_of_row(offsets, row) >= 0) continue;
    for (int64_t col = 0; col < c.n; ++col) {
      if (bits[row * c.n + col] != 0xffff) return false;
    }
  }
  return true;
}

template <typename T>
void check_gemm(const GemmCase& c, Fp8GemmKernel kernel, uint32_t seed) {
  SCOPED_TRACE(
      fmt::format("{} {} {}", dtype_label<T>(), cuda::fp8_gemm_kernel_name(kernel), c.describe()));
  std::mt19937 rng(seed);
  const std::vector<int32_t> offsets = case_offsets(c);
  const int64_t experts = static_cast<int64_t>(c.rows_per_expert.size());
  const int64_t max_rows = offsets[experts] + c.extra_rows;
  const int64_t n_b = c.gated() ? 2 * c.n : c.n;

  const QuantRows a =
      quantize_rows(random_activations<T>(max_rows, c.k, 2.0f, rng), max_rows, c.k, c.per_token);
  const Fp8Weights w = random_weights(experts, n_b, c.k, c.scales, rng);
  std::uniform_real_distribution<float> bias_value(-0.5f, 0.5f);
  std::vector<float> bias(experts * n_b);
  for (float& b : bias) b = bias_value(rng);

  std::vector<T> out;
  if (!run_gemm<T>(c, a, w, bias, kernel, out)) return;

  std::vector<double> got, ref, extra;
  for (int64_t row = 0; row < max_rows; ++row) {
    const int64_t e = expert_of_row(offsets, row);
    if (e < 0) continue;
    for (int64_t col = 0; col < c.n; ++col) {
      double g = block_scaled_dot(a, row, w, e, col);
      double u = c.gated() ? block_scaled_dot(a, row, w, e, c.n + col) : 0.0;
      if (c.bias) {
        g += bias[e * n_b + col];
        if (c.gated()) u += bias[e * n_b + c.n + col];
      }
      MoEActParams act;
      act.kind = c.kind;
      ref.push_back(c.epilogue == GroupedEpilogue::kBias ? g : reference_activation(act, g, u));
      got.push_back(to_f32(out[row * c.n + col]));
      double allowance = 0.0;
      if (kernel == Fp8GemmKernel::kWgmma || cuda::is_fp8_tma_kernel(kernel)) {
        const double dg = kWgmmaAccumulation * block_scaled_dot(a, row, w, e, col, true);
        const double du =
            c.gated() ? kWgmmaAccumulation * block_scaled_dot(a, row, w, e, c.n + col, true) : 0.0;
        allowance = c.epilogue == GroupedEpilogue::kBias ? dg : activation_allowance(g, u, dg, du);
      }
      extra.push_back(allowance);
    }
  }
  EXPECT_TRUE(rows_outside_untouched(c, out)) << "a row outside the experts' rows was written";
  const std::string why =
      compare_bounded(got, ref, Bounds<T>::kRel, Bounds<T>::kAbs, Bounds<T>::kL2, &extra);
  EXPECT_TRUE(why.empty()) << why;
}

// Inputs whose block sums every kernel computes exactly, so the kernels must agree with the fp64
// reference bit for bit: codes in {0, ±1, ±2} (products are integers of at most 4, a 128-wide
// block's sum at most 512: 10 bits, exact in any accumulator the FP8 tensor cores use), scales
// powers of two (1/4 .. 1 for the rows, 2^-6 .. 2^-4 for the weights: the promoted sums are
// multiples of 2^-8 below 2^13, exact in fp32) and biases multiples of 1/16. The plain epilogue's
// output is then round_to<T>(the exact sum) for every kernel; a race, a stale stage, a wrong scale
// index or a mis-tiled edge cannot hide inside a tolerance. Gated epilogues add the activation
// (float vs double), so they are held to the GEMM bounds.
template <typename T>
void check_gemm_exact(const GemmCase& c, Fp8GemmKernel kernel, uint32_t seed) {
  SCOPED_TRACE(fmt::format("exact sums {} {} {}", dtype_label<T>(),
                           cuda::fp8_gemm_kernel_name(kernel), c.describe()));
  std::mt19937 rng(seed);
  const std::vector<int32_t> offsets = case_offsets(c);
  const int64_t experts = static_cast<int64_t>(c.rows_per_expert.size());
  const int64_t max_rows = offsets[experts] + c.extra_rows;
  const int64_t n_b = c.gated() ? 2 * c.n : c.n;
  std::uniform_int_distribution<int> pick(0, 4);
  const uint8_t codes[5] = {float_to_fp8_e4m3(0.0f), float_to_fp8_e4m3(1.0f),
                            float_to_fp8_e4m3(-1.0f), float_to_fp8_e4m3(2.0f),
                            float_to_fp8_e4m3(-2.0f)};
  std::uniform_int_distribution<int> exponent(0, 2);

  QuantRows a;
  a.rows = max_rows;
  a.k = c.k;
  a.groups = cuda::fp8_groups(c.k);
  a.cols = cuda::fp8_act_scale_cols(c.k, c.per_token);
  a.q.resize(max_rows * c.k);
  for (uint8_t& q : a.q) q = codes[pick(rng)];
  a.s.resize(max_rows * a.cols);
  for (float& s : a.s) s = std::ldexp(1.0f, -exponent(rng));

  Fp8Weights w = random_weights(experts, n_b, c.k, c.scales, rng);
  for (uint8_t& q : w.codes) q = codes[pick(rng)];
  for (float& s : w.scales) s = std::ldexp(1.0f, -4 - exponent(rng));
  std::uniform_int_distribution<int> sixteenths(-8, 8);
  std::vector<float> bias(experts * n_b);
  for (float& b : bias) b = static_cast<float>(sixteenths(rng)) / 16.0f;

  std::vector<T> out;
  if (!run_gemm<T>(c, a, w, bias, kernel, out)) return;

  std::vector<double> got, ref;
  int64_t inexact = 0;
  std::string first;
  for (int64_t row = 0; row < max_rows; ++row) {
    const int64_t e = expert_of_row(offsets, row);
    if (e < 0) continue;
    for (int64_t col = 0; col < c.n; ++col) {
      double g = block_scaled_dot(a, row, w, e, col);
      double u = c.gated() ? block_scaled_dot(a, row, w, e, c.n + col) : 0.0;
      if (c.bias) {
        g += bias[e * n_b + col];
        if (c.gated()) u += bias[e * n_b + c.n + col];
      }
      const float value = to_f32(out[row * c.n + col]);
      if (c.epilogue == GroupedEpilogue::kBias) {
        if (value != round_to<T>(g) && inexact++ == 0) {
          first = fmt::format("row {} (expert {}) col {}: got {} want {}", row, e, col, value,
                              round_to<T>(g));
        }
        continue;
      }
      MoEActParams act;
      act.kind = c.kind;
      ref.push_back(reference_activation(act, g, u));
      got.push_back(value);
    }
  }
  EXPECT_TRUE(rows_outside_untouched(c, out)) << "a row outside the experts' rows was written";
  EXPECT_EQ(inexact, 0) << "outputs differ from the exact sums (first: " << first << ")";
  const std::string why =
      compare_bounded(got, ref, Bounds<T>::kRel, Bounds<T>::kAbs, Bounds<T>::kL2);
  EXPECT_TRUE(why.empty()) << why;
}

std::vector<GemmCase> gemm_cases() {
  const std::vector<std::vector<int32_t>> patterns = {
      {1, 0, 7, 33, 0},  // 5 experts: 1 row, none, 7, 33 (two 16-row tiles + 1), none
      {300, 0, 1},       // 3 experts: 300 rows (partial 64- and 128-row tiles), none, 1
      {0, 0, 0},         // no rows at all
  };
  const int64_t shapes[][2] = {{128, 128}, {256, 256}, {448, 448}, {200, 48}, {72, 1040}};
  const ScaleKind scale_kinds[] = {ScaleKind::kBlock, ScaleKind::kTensor, ScaleKind::kChannel};
  std::vector<GemmCase> cases;
  int index = 0;
  for (const auto& pattern : patterns) {
    for (const auto& shape : shapes) {
      for (int epi = 0; epi < 3; ++epi) {  // plain bias, gated act, plain act
        GemmCase c;
        c.rows_per_expert = pattern;
        c.first_row = index % 4 == 1 ? 3 : 0;
        c.extra_rows = (index % 3) * 5;
        c.n = shape[0];
        c.k = shape[1];
        c.epilogue = epi == 0 ? GroupedEpilogue::kBias : GroupedEpilogue::kActivation;
        c.kind = epi == 1 ? kAllKinds[index % 4] : kAllKinds[4 + index % 3];
        c.bias = index % 2 == 0;
        // Blocks of 128 x 128 most often, the other layouts in between.
        c.scales = index % 3 == 0 ? scale_kinds[(index / 3) % 3] : ScaleKind::kBlock;
        // Per-token activation scales (compressed-tensors' dynamic "token" strategy) now and then.
        c.per_token = index % 5 == 2;
        cases.push_back(c);
        ++index;
      }
    }
  }
  return cases;
}

TEST(CudaFp8Experts, GroupedGemmEveryKernelMatchesReference) {
  MG_REQUIRE_GPU();
  uint32_t seed = 1000;
  for (const GemmCase& c : gemm_cases()) {
    for (const Fp8GemmKernel kernel : cuda::kAllFp8GemmKernels) {
      for_each_dtype([&]<typename T>() { check_gemm<T>(c, kernel, ++seed); });
    }
  }
}

// Every weight scale layout with each epilogue, activation scales per 128 group and per token, on
// one shape with partial blocks in N and K.
TEST(CudaFp8Experts, GroupedGemmEveryScaleLayout) {
  MG_REQUIRE_GPU();
  uint32_t seed = 2000;
  for (const ScaleKind scales : {ScaleKind::kBlock, ScaleKind::kTensor, ScaleKind::kChannel}) {
    for (const GroupedEpilogue epilogue : {GroupedEpilogue::kBias, GroupedEpilogue::kActivation}) {
      GemmCase c;
      c.rows_per_expert = {20, 0, 65, 3};
      c.extra_rows = 2;
      c.n = 448;
      c.k = 448;
      c.epilogue = epilogue;
      c.kind = MoEActKind::kSwigluOai;
      c.bias = true;
      c.scales = scales;
      for (const bool per_token : {false, true}) {
        c.per_token = per_token;
        for (const Fp8GemmKernel kernel : cuda::kAllFp8GemmKernels) {
          check_gemm<__nv_bfloat16>(c, kernel, ++seed);
        }
      }
    }
  }
}

// Every kernel bit for bit against exact sums (check_gemm_exact) over what tiles get wrong: 11 and
// 7 experts (odd counts) with no rows, 1 row, 127/128/129 rows (a 128-row wgmma tile and one row
// more), 255 and 300 rows (several partial 128- and 64-row tiles), offsets not starting at 0 and
// rows past the last expert; N of 448 (partial 128-column tiles), 200 and 72; K of 448 (four K
// blocks, the last 64 wide), 1040 (nine, the last 16 wide) and 48 (one partial block); every
// weight scale layout; activation scales per 128 group and per token.
TEST(CudaFp8Experts, GroupedGemmExactSumsEveryKernel) {
  MG_REQUIRE_GPU();
  const std::vector<std::vector<int32_t>> patterns = {
      {0, 1, 127, 128, 129, 0, 255, 300, 17, 64, 65},
      {5, 0, 0, 3, 0, 200, 1},
  };
  const int64_t shapes[][2] = {{448, 448}, {200, 1040}, {72, 48}};
  const ScaleKind scale_kinds[] = {ScaleKind::kBlock, ScaleKind::kTensor, ScaleKind::kChannel};
  uint32_t seed = 5000;
  int index = 0;
  for (const auto& pattern : patterns) {
    for (const auto& shape : shapes) {
      for (const bool gated : {false, true}) {
        GemmCase c;
        c.rows_per_expert = pattern;
        c.first_row = index % 2 == 1 ? 3 : 0;
        c.extra_rows = index % 3 == 0 ? 7 : 0;
        c.n = shape[0];
        c.k = shape[1];
        c.epilogue = gated ? GroupedEpilogue::kActivation : GroupedEpilogue::kBias;
        c.kind = MoEActKind::kSiluGated;
        c.bias = index % 2 == 0;
        c.scales = scale_kinds[index % 3];
        c.per_token = index % 4 == 3;
        ++index;
        for (const Fp8GemmKernel kernel : cuda::kAllFp8GemmKernels) {
          for_each_dtype([&]<typename T>() { check_gemm_exact<T>(c, kernel, ++seed); });
        }
      }
    }
  }
}

// fp8_tma and fp8_tma64 compute fp8_wgmma's sums in fp8_wgmma's order, so each must agree with it
// bit for bit, here on random data over more tiles than the GPU has SMs (every CTA of the
// persistent kernel loops over several tiles; fp8_tma64's two pipelines take them apart) and more
// K blocks than it has stages (each stage's barriers go through several phases), with experts of
// no rows, 1 row, 64/65 rows (one or both consumer warpgroups of a 128-row tile; one or two
// 64-row tiles) and a partial last N tile; with 128 x 128 and per-tensor weight scales (one scale
// a gate/up half of a tile: the TMA kernels' short promotion) and per-channel ones (a scale a
// weight row: the general promotion).
TEST(CudaFp8Experts, TmaKernelMatchesWgmmaOverManyTilesPerCta) {
  MG_REQUIRE_GPU();
  if (!runs_here(Fp8GemmKernel::kTma)) GTEST_SKIP() << "no sm_90a kernels here";
  uint32_t seed = 5600;
  for (const ScaleKind scales : {ScaleKind::kBlock, ScaleKind::kTensor, ScaleKind::kChannel}) {
    for (const bool gated : {true, false}) {
      GemmCase c;
      c.scales = scales;
      c.rows_per_expert = {700, 0, 129, 1, 64, 65, 1500, 300, 900};
      c.first_row = 3;
      c.extra_rows = 5;
      c.n = gated ? 448 : 1000;
      c.k = 1040;
      c.epilogue = gated ? GroupedEpilogue::kActivation : GroupedEpilogue::kBias;
      c.kind = MoEActKind::kSiluGated;
      c.bias = true;
      c.per_token = !gated;
      for_each_dtype([&]<typename T>() {
        SCOPED_TRACE(fmt::format("{} {}", dtype_label<T>(), c.describe()));
        std::mt19937 rng(++seed);
        const std::vector<int32_t> offsets = case_offsets(c);
        const int64_t experts = static_cast<int64_t>(c.rows_per_expert.size());
        const int64_t max_rows = offsets[experts] + c.extra_rows;
        const int64_t n_b = gated ? 2 * c.n : c.n;
        const QuantRows a = quantize_rows(random_activations<T>(max_rows, c.k, 2.0f, rng), max_rows,
                                          c.k, c.per_token);
        const Fp8Weights w = random_weights(experts, n_b, c.k, c.scales, rng);
        std::uniform_real_distribution<float> bias_value(-0.5f, 0.5f);
        std::vector<float> bias(experts * n_b);
        for (float& b : bias) b = bias_value(rng);
        std::vector<T> wgmma;
        ASSERT_TRUE(run_gemm<T>(c, a, w, bias, Fp8GemmKernel::kWgmma, wgmma));
        for (const Fp8GemmKernel kernel : {Fp8GemmKernel::kTma, Fp8GemmKernel::kTma64}) {
          SCOPED_TRACE(cuda::fp8_gemm_kernel_name(kernel));
          std::vector<T> tma;
          ASSERT_TRUE(run_gemm<T>(c, a, w, bias, kernel, tma));
          ASSERT_EQ(tma.size(), wgmma.size());
          int64_t differ = 0;
          for (size_t i = 0; i < tma.size(); ++i) {
            differ += std::memcmp(&tma[i], &wgmma[i], sizeof(T)) != 0;
          }
          EXPECT_EQ(differ, 0) << "of " << tma.size() << " outputs";
          EXPECT_TRUE(rows_outside_untouched(c, tma));
        }
      });
    }
  }
}

// fp8_tma_weight_scales_uniform (host only) against every tile of the TMA kernels, each weight
// row's scale block found as the producer finds it (clamped past N): where it says one scale per
// tile half, every tile's halves must hold that; and it must say so for the common layouts.
TEST(CudaFp8Experts, UniformWeightScalesHoldForEveryTile) {
  const auto tiles_uniform = [](int64_t n, int64_t block_n, bool gated) {
    const int64_t half = gated ? 64 : 128;
    for (int64_t n0 = 0; n0 < n; n0 += half) {
      int64_t first[2] = {-1, -1};
      for (int64_t r = 0; r < 128; ++r) {
        const bool up = gated && r >= 64;
        const int64_t col = std::min(n0 + (up ? r - 64 : r), n - 1);
        const int64_t block = ((up ? n : 0) + col) / block_n;
        if (first[up] < 0) first[up] = block;
        if (block != first[up]) return false;
      }
    }
    return true;
  };
  // The enumeration itself sees a straddling tile (N 72: up rows 72..135 cross block 1 at 128).
  EXPECT_FALSE(tiles_uniform(72, 128, true));
  EXPECT_FALSE(tiles_uniform(2048, 1, false));
  int64_t said_uniform = 0;
  for (const bool gated : {true, false}) {
    for (const int64_t n : {64, 72, 100, 128, 200, 448, 768, 1000, 2048, 2880, 14336}) {
      for (const int64_t block_n : {1, 16, 32, 64, 96, 128, 192, 256, 100, 200, 448, 896, 28672}) {
        SCOPED_TRACE(fmt::format("gated {} N {} block_n {}", gated, n, block_n));
        if (cuda::fp8_tma_weight_scales_uniform(n, block_n, gated)) {
          ++said_uniform;
          EXPECT_TRUE(tiles_uniform(n, block_n, gated));
        }
      }
    }
  }
  EXPECT_GT(said_uniform, 40);
  EXPECT_TRUE(cuda::fp8_tma_weight_scales_uniform(14336, 128, true));  // mixtral, 128 x 128
  EXPECT_TRUE(cuda::fp8_tma_weight_scales_uniform(7168, 128, false));  // deepseek-v3 w2
  EXPECT_TRUE(cuda::fp8_tma_weight_scales_uniform(100, 200, true));    // one scale per tensor
  EXPECT_FALSE(cuda::fp8_tma_weight_scales_uniform(2048, 1, true));    // per channel
  EXPECT_FALSE(cuda::fp8_tma_weight_scales_uniform(72, 128, true));    // up rows straddle
  EXPECT_FALSE(cuda::fp8_tma_weight_scales_uniform(1000, 64, false));  // 64-row blocks, 128 rows
  EXPECT_FALSE(cuda::fp8_tma_weight_scales_uniform(448, 0, true));
}

// What the kernels cannot take is refused with a reason (host checks: no GPU needed).
TEST(CudaFp8Experts, RefusesUnsupportedShapes) {
  EXPECT_NE(cuda::fp8_gemm_check(128, 40), "");
  // H = 200 with block scales: refused naming the size (16-code vectors); H = 208, I = 96 taken.
  const cuda::Fp8WeightScales block{nullptr, 128, 128};
  EXPECT_NE(cuda::fp8_expert_mlp_check(200, 96, true, block, block).find("200"), std::string::npos);
  EXPECT_EQ(cuda::fp8_expert_mlp_check(208, 96, true, block, block), "");
  EXPECT_NE(cuda::fp8_gemm_check(0, 128), "");
  {
    cuda::Fp8QuantArgs q;  // a static scale needs the per-token layout
    const float scale = 1.0f;
    q.k = 128;
    q.max_rows = 1;
    q.static_scale = &scale;  // (never read: the launcher refuses first)
    EXPECT_THROW(cuda::launch_fp8_quantize<__nv_bfloat16>(q, nullptr), Error);
  }
  EXPECT_EQ(cuda::fp8_gemm_check(200, 48), "");
  EXPECT_NE(cuda::fp8_weight_scales_check(128, 64, 256, 256), "");
  EXPECT_EQ(cuda::fp8_weight_scales_check(1, 448, 256, 448), "");
  EXPECT_EQ(cuda::fp8_weight_scales_check(128, 128, 448, 448), "");
  EXPECT_NE(cuda::fp8_activation_dtype_check(4), "");
  EXPECT_EQ(cuda::fp8_activation_dtype_check(2), "");
  EXPECT_NE(cuda::fp8_decode_check(9, 1, 256, 256, true, {}, {}), "");
  EXPECT_NE(cuda::fp8_decode_check(8, 33, 256, 256, true, {}, {}), "");
  for (const Fp8GemmKernel kernel : cuda::kAllFp8GemmKernels) {
    EXPECT_EQ(cuda::parse_fp8_gemm_kernel(cuda::fp8_gemm_kernel_name(kernel)), kernel);
  }
  EXPECT_EQ(cuda::parse_fp8_gemm_kernel("mma16"), std::nullopt);
  EXPECT_EQ(cuda::fp8_gemm_kernel_check(Fp8GemmKernel::kMma16, false), "");
  // The kernel runs where the sm_90a code is; models get it only through the kernel choice
  // (fp8_kernel_choice.cc), which keeps it disabled for now.
  EXPECT_EQ(cuda::fp8_gemm_kernel_check(Fp8GemmKernel::kWgmma, true), "");
  EXPECT_NE(cuda::fp8_gemm_kernel_check(Fp8GemmKernel::kWgmma, false), "");
  // fp8_tma's boxes: K >= 128, >= 64 rows, N >= 64 gated / 128 plain; 32-bit scale offsets.
  EXPECT_EQ(cuda::fp8_tma_shape_check(448, 448, 64, 4, 128, 128, true), "");
  EXPECT_EQ(cuda::fp8_tma_shape_check(128, 128, 64, 1, 1, 128, false), "");
  EXPECT_NE(cuda::fp8_tma_shape_check(448, 96, 1000, 4, 128, 128, true).find("K 96"),
            std::string::npos);
  EXPECT_NE(cuda::fp8_tma_shape_check(448, 448, 63, 4, 128, 128, true).find("63 rows"),
            std::string::npos);
  EXPECT_NE(cuda::fp8_tma_shape_check(63, 448, 1000, 4, 128, 128, true).find("N 63"),
            std::string::npos);
  EXPECT_NE(cuda::fp8_tma_shape_check(100, 448, 1000, 4, 128, 128, false).find("N 100"),
            std::string::npos);
  EXPECT_NE(cuda::fp8_tma_shape_check(448, 448, 1000, 4, 0, 128, true).find("positive"),
            std::string::npos);
  EXPECT_NE(
      cuda::fp8_tma_shape_check(4096, 4096, 1000, int64_t{1} << 20, 1, 128, false).find("32-bit"),
      std::string::npos);
  cuda::Fp8GemmArgs args;
  args.n = 128;
  args.k = 40;
  args.num_experts = 1;
  args.max_rows = 1;
  EXPECT_THROW(cuda::launch_fp8_grouped_gemm<__nv_bfloat16>(args, Fp8GemmKernel::kMma16, nullptr),
               Error);
  args.k = 256;
  args.b_scales.block_k = 64;
  EXPECT_THROW(cuda::launch_fp8_grouped_gemm<__nv_bfloat16>(args, Fp8GemmKernel::kMma64, nullptr),
               Error);
}

// ---- The expert MLP and decode ---------------------------------------------------------------

struct MlpProblem {
  int64_t hidden = 0, inter = 0, experts = 0;
  MoEActParams act;
  bool bias = false;
  bool per_token = false;  // activation scales per token, else per 128 group
  float x_static = 0.0f;   // > 0: static scale of x (needs per_token)
  float h_static = 0.0f;   // > 0: static scale of h
  Fp8Weights w13, w2;
  std::vector<float> b13, b2;
};

MlpProblem random_mlp(int64_t experts, int64_t hidden, int64_t inter, MoEActKind kind, bool bias,
                      ScaleKind scales, std::mt19937& rng) {
  MlpProblem p;
  p.hidden = hidden;
  p.inter = inter;
  p.experts = experts;
  p.act.kind = kind;
  p.bias = bias;
  const int64_t n1 = cuda::is_gated(kind) ? 2 * inter : inter;
  p.w13 = random_weights(experts, n1, hidden, scales, rng);
  p.w2 = random_weights(experts, hidden, inter, scales, rng);
  std::uniform_real_distribution<float> b(-0.5f, 0.5f);
  p.b13.resize(experts * n1);
  p.b2.resize(experts * hidden);
  for (float& v : p.b13) v = b(rng);
  for (float& v : p.b2) v = b(rng);
  return p;
}

// GEMM1 + activation of one row through expert e in fp64 (before the rounding to T), from x (T
// values) quantised as the kernels do; `allowance` (if given) gets fp8_wgmma's accumulation
// allowance per element.
std::vector<double> reference_h_row(const MlpProblem& p, int64_t e, const float* x,
                                    std::vector<double>* allowance = nullptr) {
  const std::vector<float> xv(x, x + p.hidden);
  const QuantRows xq = p.x_static > 0.0f ? quantize_rows_static(xv, 1, p.hidden, p.x_static)
                                         : quantize_rows(xv, 1, p.hidden, p.per_token);
  const bool gated = cuda::is_gated(p.act.kind);
  const int64_t n1 = gated ? 2 * p.inter : p.inter;
  std::vector<double> h(p.inter);
  if (allowance) allowance->assign(p.inter, 0.0);
  for (int64_t i = 0; i < p.inter; ++i) {
    double g = block_scaled_dot(xq, 0, p.w13, e, i);
    double u = gated ? block_scaled_dot(xq, 0, p.w13, e, p.inter + i) : 0.0;
    if (p.bias) {
      g += p.b13[e * n1 + i];
      if (gated) u += p.b13[e * n1 + p.inter + i];
    }
    h[i] = reference_activation(p.act, g, u);
    if (allowance) {
      const double dg = kWgmmaAccumulation * block_scaled_dot(xq, 0, p.w13, e, i, true);
      const double du =
          gated ? kWgmmaAccumulation * block_scaled_dot(xq, 0, p.w13, e, p.inter + i, true) : 0.0;
      (*allowance)[i] = activation_allowance(g, u, dg, du);
    }
  }
  return h;
}

// GEMM2 of one row through expert e in fp64 from h (T values) quantised as the kernels do.
std::vector<double> reference_y_row(const MlpProblem& p, int64_t e, const std::vector<float>& h,
                                    std::vector<double>* allowance = nullptr) {
  const QuantRows hq = p.h_static > 0.0f ? quantize_rows_static(h, 1, p.inter, p.h_static)
                                         : quantize_rows(h, 1, p.inter, p.per_token);
  std::vector<double> y(p.hidden);
  if (allowance) allowance->assign(p.hidden, 0.0);
  for (int64_t col = 0; col < p.hidden; ++col) {
    y[col] = block_scaled_dot(hq, 0, p.w2, e, col) + (p.bias ? p.b2[e * p.hidden + col] : 0.0);
    if (allowance) {
      (*allowance)[col] = kWgmmaAccumulation * block_scaled_dot(hq, 0, p.w2, e, col, true);
    }
  }
  return y;
}

// One row through expert e as the kernels compute it, in fp64 with the same roundings to T and
// the same quantisations: x (T values) -> y [H] (before the final rounding to T).
template <typename T>
std::vector<double> reference_mlp_row(const MlpProblem& p, int64_t e, const float* x) {
  const std::vector<double> h = reference_h_row(p, e, x);
  std::vector<float> h_t(p.inter);
  for (int64_t i = 0; i < p.inter; ++i) h_t[i] = round_to<T>(h[i]);
  return reference_y_row(p, e, h_t);
}

// Device copies of an MLP's weights.
struct DeviceMlp {
  explicit DeviceMlp(const MlpProblem& p)
      : w13(p.w13.codes.size()),
        s13(p.w13.scales.size() * 4),
        b13(p.b13.size() * 4),
        w2(p.w2.codes.size()),
        s2(p.w2.scales.size() * 4),
        b2(p.b2.size() * 4) {
    upload(w13, p.w13.codes);
    upload(s13, p.w13.scales);
    upload(b13, p.b13);
    upload(w2, p.w2.codes);
    upload(s2, p.w2.scales);
    upload(b2, p.b2);
  }
  DeviceBuffer w13, s13, b13, w2, s2, b2;
};

// Bounds of the whole MLP: the GEMMs' plus what re-quantising the intermediate may flip (an
// intermediate one ulp of T off across an e4m3 rounding boundary moves its code by one e4m3 step;
// rare, so the per-element bound is 2^-6 |ref| + 2^-6 rms and the L2 bound 1e-2).
constexpr double kMlpRel = 1.0 / 64, kMlpAbs = 1.0 / 64, kMlpL2 = 1e-2;

struct MlpCase {
  int64_t tokens = 0, top_k = 0, experts = 0, hidden = 0, inter = 0;
  MoEActKind kind = MoEActKind::kSiluGated;
  bool bias = false;
  ScaleKind scales = ScaleKind::kBlock;
  bool per_token = false;
  float x_static = 0.0f, h_static = 0.0f;  // > 0: static activation scales (with per_token)
  std::string describe() const {
    return fmt::format(
        "tokens {} top_k {} experts {} H {} I {} act {} bias {} scales {} per_token {} static {} "
        "{}",
        tokens, top_k, experts, hidden, inter, static_cast<int>(kind), bias,
        scale_kind_name(scales), per_token, x_static, h_static);
  }
};

template <typename T>
void check_mlp(const MlpCase& c, Fp8GemmKernel kernel, uint32_t seed) {
  SCOPED_TRACE(
      fmt::format("{} {} {}", dtype_label<T>(), cuda::fp8_gemm_kernel_name(kernel), c.describe()));
  std::mt19937 rng(seed);
  MlpProblem p = random_mlp(c.experts, c.hidden, c.inter, c.kind, c.bias, c.scales, rng);
  p.per_token = c.per_token;
  p.x_static = c.x_static;
  p.h_static = c.h_static;
  const float statics[2] = {c.x_static, c.h_static};
  DeviceBuffer d_statics(sizeof(statics));
  d_statics.upload(statics, sizeof(statics));
  const std::vector<float> x = random_activations<T>(c.tokens, c.hidden, 2.0f, rng);
  // Route every pair to a random expert except the last one (an expert with no rows), then sort
  // the pairs by expert as moe_align does: row_to_pair and offsets.
  const int64_t pairs = c.tokens * c.top_k;
  std::uniform_int_distribution<int64_t> pick(0, std::max<int64_t>(c.experts - 2, 0));
  std::vector<int64_t> expert_of(pairs);
  for (int64_t& e : expert_of) e = pick(rng);
  std::vector<int32_t> row_to_pair(pairs), offsets(c.experts + 1, 0);
  std::iota(row_to_pair.begin(), row_to_pair.end(), 0);
  std::stable_sort(row_to_pair.begin(), row_to_pair.end(),
                   [&](int32_t a, int32_t b) { return expert_of[a] < expert_of[b]; });
  for (int64_t pr = 0; pr < pairs; ++pr) ++offsets[expert_of[pr] + 1];
  for (int64_t e = 0; e < c.experts; ++e) offsets[e + 1] += offsets[e];

  DeviceMlp d(p);
  DeviceBuffer d_x(x.size() * sizeof(T)), d_map(pairs * 4), d_offsets(offsets.size() * 4);
  upload(d_x, to_dtype<T>(x));
  upload(d_map, row_to_pair);
  upload(d_offsets, offsets);
  const size_t out_bytes = pairs * c.hidden * sizeof(T);
  const size_t scratch_bytes =
      cuda::fp8_expert_mlp_scratch_bytes(pairs, c.hidden, c.inter, sizeof(T));
  DeviceBuffer d_out(out_bytes), d_scratch(scratch_bytes);

  cuda::Fp8ExpertMlpArgs args;
  args.x = d_x.as<void>();
  args.row_to_pair = d_map.as<int32_t>();
  args.top_k = c.top_k;
  args.expert_offsets = d_offsets.as<int32_t>();
  args.num_experts = c.experts;
  args.max_rows = pairs;
  args.hidden = c.hidden;
  args.inter = c.inter;
  args.w13 = d.w13.as<uint8_t>();
  args.s13 = scales_of(p.w13, d.s13);
  args.b13 = c.bias ? d.b13.as<float>() : nullptr;
  args.w2 = d.w2.as<uint8_t>();
  args.s2 = scales_of(p.w2, d.s2);
  args.b2 = c.bias ? d.b2.as<float>() : nullptr;
  args.act = p.act;
  args.act_per_token = c.per_token;
  args.x_static_scale = c.x_static > 0.0f ? d_statics.as<float>() : nullptr;
  args.h_static_scale = c.h_static > 0.0f ? d_statics.as<float>() + 1 : nullptr;
  args.out = d_out.as<void>();
  args.scratch = d_scratch.as<void>();
  args.scratch_bytes = scratch_bytes;
  if (!runs_here(kernel)) {
    EXPECT_THROW(cuda::launch_fp8_expert_mlp<T>(args, kernel, nullptr), Error);
    return;
  }
  const std::vector<uint8_t> bytes = run_eager_and_graph(
      [&](cudaStream_t s) { cuda::launch_fp8_expert_mlp<T>(args, kernel, s); }, d_out, out_bytes);
  std::vector<T> out(pairs * c.hidden);
  std::memcpy(out.data(), bytes.data(), out_bytes);

  // Stage by stage, each GEMM held to the GEMM bounds: GEMM1 + act against the fp64 h, and GEMM2
  // against the fp64 y of the GPU's own h (read back from the scratch), so a GEMM whose
  // accumulation is less precise than fp32 (fp8_wgmma: kWgmmaAccumulation) is judged by its own
  // error, not by where an intermediate one T ulp off crosses an e4m3 rounding boundary.
  const bool wgmma = kernel == Fp8GemmKernel::kWgmma || cuda::is_fp8_tma_kernel(kernel);
  std::vector<T> h_gpu(pairs * c.inter);
  MG_CUDA_CHECK(
      cudaMemcpy(h_gpu.data(),
                 d_scratch.as<uint8_t>() + cuda::fp8_expert_mlp_scratch_h_offset(pairs, c.hidden),
                 h_gpu.size() * sizeof(T), cudaMemcpyDeviceToHost));
  std::vector<double> h_got, h_ref, h_extra, y_got, y_ref, y_extra, ref;
  for (int64_t row = 0; row < pairs; ++row) {
    const int32_t pair = row_to_pair[row];
    const float* x_row = x.data() + (pair / c.top_k) * c.hidden;
    std::vector<double> allowance;
    const std::vector<double> h =
        reference_h_row(p, expert_of[pair], x_row, wgmma ? &allowance : nullptr);
    std::vector<float> h_row(c.inter);
    for (int64_t i = 0; i < c.inter; ++i) {
      h_row[i] = to_f32(h_gpu[row * c.inter + i]);
      h_got.push_back(h_row[i]);
      h_ref.push_back(h[i]);
      h_extra.push_back(wgmma ? allowance[i] : 0.0);
    }
    const std::vector<double> y =
        reference_y_row(p, expert_of[pair], h_row, wgmma ? &allowance : nullptr);
    const std::vector<double> y_end_to_end = reference_mlp_row<T>(p, expert_of[pair], x_row);
    for (int64_t col = 0; col < c.hidden; ++col) {
      y_got.push_back(to_f32(out[row * c.hidden + col]));
      y_ref.push_back(y[col]);
      y_extra.push_back(wgmma ? allowance[col] : 0.0);
      ref.push_back(y_end_to_end[col]);
    }
  }
  const std::string why_h =
      compare_bounded(h_got, h_ref, Bounds<T>::kRel, Bounds<T>::kAbs, Bounds<T>::kL2, &h_extra);
  EXPECT_TRUE(why_h.empty()) << "GEMM1 + act: " << why_h;
  const std::string why_y =
      compare_bounded(y_got, y_ref, Bounds<T>::kRel, Bounds<T>::kAbs, Bounds<T>::kL2, &y_extra);
  EXPECT_TRUE(why_y.empty()) << "GEMM2 on the GPU's h: " << why_y;
  // End to end against the fp64 pipeline: the mma kernels accumulate each k32 step in fp32, so
  // their h lands on the reference's side of an e4m3 boundary but rarely. fp8_wgmma's coarser
  // accumulation flips such codes more often (one flipped large h code moves a row's outputs by a
  // few percent of their RMS; the H100 run that disabled it saw 137 of 6272 outputs 5-10% off,
  // about 0.011 in L2), so it is held to an L2 bound of 3e-2 only: the stages above are its test.
  const std::string why = compare_bounded(y_got, ref, wgmma ? 1e9 : kMlpRel, wgmma ? 0.0 : kMlpAbs,
                                          wgmma ? 3e-2 : kMlpL2);
  EXPECT_TRUE(why.empty()) << "end to end: " << why;
}

std::vector<MlpCase> mlp_cases() {
  return {
      {1, 1, 3, 256, 128, MoEActKind::kSiluGated, false, ScaleKind::kBlock},
      {7, 2, 5, 448, 256, MoEActKind::kSwigluOai, true, ScaleKind::kBlock},
      {40, 4, 5, 384, 48, MoEActKind::kGeluGated, true, ScaleKind::kChannel},
      {150, 2, 3, 128, 448, MoEActKind::kSilu, false, ScaleKind::kTensor},
      {13, 3, 7, 1040, 192, MoEActKind::kReluSquared, true, ScaleKind::kBlock},
      {9, 2, 3, 448, 256, MoEActKind::kSiluGated, true, ScaleKind::kChannel, true},
      // H and I not multiples of 128: partial last scale blocks in N and K of both GEMMs.
      {21, 2, 5, 208, 96, MoEActKind::kSiluGated, true, ScaleKind::kBlock},
      {21, 2, 5, 208, 96, MoEActKind::kSiluGated, false, ScaleKind::kBlock, true},
      // Static activation scales (some of h saturates at ±448).
      {9, 2, 3, 448, 256, MoEActKind::kSiluGated, true, ScaleKind::kTensor, true, 2.5f / 448,
       0.25f / 448},
  };
}

TEST(CudaFp8Experts, ExpertMlpEveryKernelMatchesReference) {
  MG_REQUIRE_GPU();
  uint32_t seed = 3000;
  for (const MlpCase& c : mlp_cases()) {
    for (const Fp8GemmKernel kernel : cuda::kAllFp8GemmKernels) {
      for_each_dtype([&]<typename T>() { check_mlp<T>(c, kernel, ++seed); });
    }
  }
}

template <typename T>
void check_decode(const MlpCase& c, uint32_t seed) {
  SCOPED_TRACE(fmt::format("{} fp8_decode {}", dtype_label<T>(), c.describe()));
  std::mt19937 rng(seed);
  // c.experts local experts out of c.experts + 2 global ones; global ids 1 and 4 are not local.
  const int64_t global = c.experts + 2;
  std::vector<int32_t> expert_map(global);
  for (int64_t g = 0, local = 0; g < global; ++g) {
    expert_map[g] = (g == 1 || g == 4) ? -1 : static_cast<int32_t>(local++);
  }
  MlpProblem p = random_mlp(c.experts, c.hidden, c.inter, c.kind, c.bias, c.scales, rng);
  p.per_token = c.per_token;
  p.x_static = c.x_static;
  p.h_static = c.h_static;
  const float statics[2] = {c.x_static, c.h_static};
  DeviceBuffer d_statics(sizeof(statics));
  d_statics.upload(statics, sizeof(statics));
  const std::vector<float> x = random_activations<T>(c.tokens, c.hidden, 2.0f, rng);
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

  DeviceMlp d(p);
  DeviceBuffer d_x(x.size() * sizeof(T)), d_ids(pairs * 4), d_w(pairs * 4),
      d_map(expert_map.size() * 4);
  upload(d_x, to_dtype<T>(x));
  upload(d_ids, ids);
  upload(d_w, weights);
  upload(d_map, expert_map);
  const size_t out_bytes = c.tokens * c.hidden * sizeof(T);
  const size_t scratch_bytes =
      cuda::fp8_decode_scratch_bytes(c.tokens, c.top_k, c.hidden, c.inter, sizeof(T));
  DeviceBuffer d_out(out_bytes), d_scratch(scratch_bytes);

  cuda::Fp8DecodeArgs args;
  args.x = d_x.as<void>();
  args.topk_ids = d_ids.as<int32_t>();
  args.topk_weights = d_w.as<float>();
  args.expert_map = d_map.as<int32_t>();
  args.w13 = d.w13.as<uint8_t>();
  args.s13 = scales_of(p.w13, d.s13);
  args.b13 = c.bias ? d.b13.as<float>() : nullptr;
  args.w2 = d.w2.as<uint8_t>();
  args.s2 = scales_of(p.w2, d.s2);
  args.b2 = c.bias ? d.b2.as<float>() : nullptr;
  args.out = d_out.as<void>();
  args.scratch = d_scratch.as<void>();
  args.scratch_bytes = scratch_bytes;
  args.num_tokens = c.tokens;
  args.top_k = c.top_k;
  args.hidden = c.hidden;
  args.inter = c.inter;
  args.act = p.act;
  args.act_per_token = c.per_token;
  args.x_static_scale = c.x_static > 0.0f ? d_statics.as<float>() : nullptr;
  args.h_static_scale = c.h_static > 0.0f ? d_statics.as<float>() + 1 : nullptr;
  const std::vector<uint8_t> bytes = run_eager_and_graph(
      [&](cudaStream_t s) { cuda::launch_fp8_decode_experts<T>(args, s); }, d_out, out_bytes);
  std::vector<T> out(c.tokens * c.hidden);
  std::memcpy(out.data(), bytes.data(), out_bytes);

  std::vector<double> got, ref;
  for (int64_t t = 0; t < c.tokens; ++t) {
    std::vector<double> sum(c.hidden, 0.0);
    for (int64_t j = 0; j < c.top_k; ++j) {
      const int32_t local = expert_map[ids[t * c.top_k + j]];
      if (local < 0) continue;
      const std::vector<double> y = reference_mlp_row<T>(p, local, x.data() + t * c.hidden);
      for (int64_t col = 0; col < c.hidden; ++col) sum[col] += weights[t * c.top_k + j] * y[col];
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
  const std::string why = compare_bounded(got, ref, kMlpRel, kMlpAbs, kMlpL2);
  EXPECT_TRUE(why.empty()) << why;
}

TEST(CudaFp8Experts, DecodeMatchesReference) {
  MG_REQUIRE_GPU();
  const std::vector<MlpCase> cases = {
      {1, 1, 3, 256, 128, MoEActKind::kSiluGated, false, ScaleKind::kBlock},
      {1, 8, 9, 448, 256, MoEActKind::kSwigluOai, true, ScaleKind::kBlock},
      {3, 4, 5, 384, 48, MoEActKind::kGeluGated, true, ScaleKind::kChannel},
      {8, 2, 3, 128, 448, MoEActKind::kSilu, false, ScaleKind::kTensor},
      {5, 6, 7, 1040, 192, MoEActKind::kReluSquared, true, ScaleKind::kBlock},
      {8, 8, 33, 512, 384, MoEActKind::kSiluGated, true, ScaleKind::kBlock},
      {4, 2, 3, 448, 256, MoEActKind::kSiluGated, true, ScaleKind::kChannel, true},
      {5, 2, 5, 208, 96, MoEActKind::kSiluGated, true, ScaleKind::kBlock},
      {4, 2, 3, 448, 256, MoEActKind::kSiluGated, true, ScaleKind::kTensor, true, 2.5f / 448,
       0.25f / 448},
  };
  uint32_t seed = 4000;
  for (const MlpCase& c : cases) {
    for_each_dtype([&]<typename T>() { check_decode<T>(c, ++seed); });
  }
}

#endif  // MG_WITH_CUDA

}  // namespace
}  // namespace mg
