// The grouped expert GEMM (ops/moe/cuda/grouped_gemm_cuda.h) against an fp64 host loop on the
// dtype-rounded inputs, in BF16, F16 and F32: both epilogues, every activation, with and without
// bias, expert row counts with zeros and uneven sizes that hit every tile config (decode, mid,
// large), odd N and K. The output is poisoned first: rows outside [offsets[0], offsets[E]) must
// keep the poison, rows inside must all be written.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "tests/cuda/cuda_test_util.h"
#include "tests/cuda/moe_kernel_test_util.h"

#ifdef MG_WITH_CUDA
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include "ops/moe/cuda/grouped_gemm_cuda.h"
#include "ops/moe/heuristics/unquantized_kernel_choice.h"
#endif

namespace mg {
namespace {

#ifdef MG_WITH_CUDA

using cuda::GroupedEpilogue;
using cuda::GroupedGemmArgs;
using cuda::MoEActKind;
using cuda::MoEActParams;

using testing::DeviceBuffer;
using testing::reference_activation;

// Host element conversions of the three dtypes (round to nearest even).
float to_f32(float x) {
  return x;
}
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
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __float2bfloat16_rn(x);
  } else {
    return x;
  }
}

struct GemmCase {
  std::vector<int32_t> rows_per_expert;
  int32_t first_row = 0;   // offsets[0]
  int64_t extra_rows = 0;  // max_rows - offsets[E]: rows that must stay untouched
  int64_t n = 0, k = 0;
  GroupedEpilogue epilogue = GroupedEpilogue::kBias;
  MoEActKind kind = MoEActKind::kSiluGated;
  bool bias = false;

  std::string describe() const {
    std::string counts;
    for (int32_t r : rows_per_expert) counts += std::to_string(r) + " ";
    return fmt::format("rows [{}] first {} extra {} n {} k {} epilogue {} act {} bias {}", counts,
                       first_row, extra_rows, n, k, static_cast<int>(epilogue),
                       static_cast<int>(kind), bias);
  }
};

template <typename T>
constexpr DType dtype_of() {
  if constexpr (std::is_same_v<T, float>) {
    return DType::kF32;
  } else if constexpr (std::is_same_v<T, __half>) {
    return DType::kF16;
  } else {
    return DType::kBF16;
  }
}

CudaDeviceTraits this_gpu() {
  return {90, 132, cuda::grouped_gemm_sm90a_kernels()};
}

// The case as the kernel choice sees it.
template <typename T>
GroupedGemmProblem problem_of(const GemmCase& c) {
  int64_t rows = c.first_row + c.extra_rows;
  for (int32_t r : c.rows_per_expert) rows += r;
  const bool gated = c.epilogue == GroupedEpilogue::kActivation && cuda::is_gated(c.kind);
  return {c.n, c.k, rows, static_cast<int64_t>(c.rows_per_expert.size()), gated, dtype_of<T>()};
}

// Runs one case on `kernel` (nullopt: the one the heuristics choose); returns the normalised
// error over the written rows (inf when an element is not finite) and sets `untouched` to whether
// the rows outside the experts kept the poison bytes.
template <typename T>
double run_case(const GemmCase& c, uint32_t seed, bool& untouched,
                std::optional<cuda::GroupedGemmKernel> kernel = std::nullopt) {
  const int64_t num_experts = static_cast<int64_t>(c.rows_per_expert.size());
  std::vector<int32_t> offsets(num_experts + 1, c.first_row);
  for (int64_t e = 0; e < num_experts; ++e) offsets[e + 1] = offsets[e] + c.rows_per_expert[e];
  const int64_t max_rows = offsets[num_experts] + c.extra_rows;
  const bool gated = c.epilogue == GroupedEpilogue::kActivation && cuda::is_gated(c.kind);
  const int64_t n_b = gated ? 2 * c.n : c.n;

  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<T> a(max_rows * c.k), b(num_experts * n_b * c.k), bias(num_experts * n_b);
  const float weight_scale = 2.0f / std::sqrt(static_cast<float>(c.k));
  for (T& x : a) x = from_f32<T>(uniform(rng));
  for (T& x : b) x = from_f32<T>(uniform(rng) * weight_scale);
  for (T& x : bias) x = from_f32<T>(uniform(rng));

  const size_t c_bytes = max_rows * c.n * sizeof(T);
  DeviceBuffer d_a(a.size() * sizeof(T)), d_b(b.size() * sizeof(T));
  DeviceBuffer d_bias(bias.size() * sizeof(T)), d_c(c_bytes);
  DeviceBuffer d_offsets(offsets.size() * sizeof(int32_t));
  MG_CUDA_CHECK(cudaMemcpy(d_a.as<void>(), a.data(), a.size() * sizeof(T), cudaMemcpyHostToDevice));
  MG_CUDA_CHECK(cudaMemcpy(d_b.as<void>(), b.data(), b.size() * sizeof(T), cudaMemcpyHostToDevice));
  MG_CUDA_CHECK(
      cudaMemcpy(d_bias.as<void>(), bias.data(), bias.size() * sizeof(T), cudaMemcpyHostToDevice));
  MG_CUDA_CHECK(cudaMemcpy(d_offsets.as<void>(), offsets.data(), offsets.size() * sizeof(int32_t),
                           cudaMemcpyHostToDevice));
  MG_CUDA_CHECK(cudaMemset(d_c.as<void>(), 0xff, c_bytes));

  GroupedGemmArgs args;
  args.a = d_a.as<void>();
  args.b = d_b.as<void>();
  args.bias = c.bias ? d_bias.as<void>() : nullptr;
  args.c = d_c.as<void>();
  args.expert_offsets = static_cast<const int32_t*>(d_offsets.as<void>());
  args.num_experts = num_experts;
  args.max_rows = max_rows;
  args.n = c.n;
  args.k = c.k;
  args.epilogue = c.epilogue;
  args.act.kind = c.kind;
  cuda::launch_grouped_gemm<T>(
      args, kernel ? *kernel : choose_grouped_gemm_kernel(problem_of<T>(c), this_gpu(), nullptr),
      nullptr);
  MG_CUDA_CHECK(cudaDeviceSynchronize());

  std::vector<T> out(max_rows * c.n);
  MG_CUDA_CHECK(cudaMemcpy(out.data(), d_c.as<void>(), c_bytes, cudaMemcpyDeviceToHost));
  std::vector<unsigned char> out_bytes(c_bytes);
  std::memcpy(out_bytes.data(), out.data(), c_bytes);

  untouched = true;
  double err2 = 0.0, ref2 = 0.0;
  bool finite = true;
  for (int64_t row = 0; row < max_rows; ++row) {
    int64_t expert = -1;
    for (int64_t e = 0; e < num_experts; ++e) {
      if (row >= offsets[e] && row < offsets[e + 1]) expert = e;
    }
    if (expert < 0) {
      for (size_t i = row * c.n * sizeof(T); i < (row + 1) * c.n * sizeof(T); ++i) {
        untouched = untouched && out_bytes[i] == 0xff;
      }
      continue;
    }
    for (int64_t col = 0; col < c.n; ++col) {
      double g = 0.0, u = 0.0;
      for (int64_t kk = 0; kk < c.k; ++kk) {
        const double x = to_f32(a[row * c.k + kk]);
        g += x * to_f32(b[(expert * n_b + col) * c.k + kk]);
        if (gated) u += x * to_f32(b[(expert * n_b + c.n + col) * c.k + kk]);
      }
      if (c.bias) {
        g += to_f32(bias[expert * n_b + col]);
        if (gated) u += to_f32(bias[expert * n_b + c.n + col]);
      }
      MoEActParams act;
      act.kind = c.kind;
      const double ref = c.epilogue == GroupedEpilogue::kBias ? g : reference_activation(act, g, u);
      const double got = to_f32(out[row * c.n + col]);
      finite = finite && std::isfinite(got);
      err2 += (got - ref) * (got - ref);
      ref2 += ref * ref;
    }
  }
  if (!finite) return INFINITY;
  return ref2 == 0.0 ? std::sqrt(err2) : std::sqrt(err2 / ref2);
}

constexpr MoEActKind kAllKinds[] = {MoEActKind::kSiluGated,     MoEActKind::kGeluGated,
                                    MoEActKind::kGeluTanhGated, MoEActKind::kSwigluOai,
                                    MoEActKind::kReluSquared,   MoEActKind::kSilu,
                                    MoEActKind::kGelu};

// The case grid: row patterns that select each tile config (average rows per expert <= 16,
// <= 64, above), times N/K shapes with tails of every tile width, times epilogue and bias; the
// activation kind cycles through all kinds.
std::vector<GemmCase> case_grid() {
  const std::vector<std::vector<int32_t>> patterns = {
      {1, 0, 3, 0, 0, 2, 17, 0},  // decode tiles; one expert spans two 16-row tiles
      {0, 40, 7, 0, 90, 33},      // mid tiles
      {300, 0, 129, 1, 257},      // large tiles, partial last tiles
      {0, 0, 0},                  // no rows at all
  };
  const int64_t shapes[][2] = {{8, 8}, {24, 24}, {200, 200}, {72, 2880}, {2880, 136}, {136, 456}};
  std::vector<GemmCase> cases;
  int index = 0;
  for (const auto& pattern : patterns) {
    int64_t rows = 0;
    for (int32_t r : pattern) rows += r;
    for (const auto& shape : shapes) {
      // Keeps the host reference loop to a few hundred million multiply-adds.
      if (rows * shape[0] * shape[1] * 2 > 400'000'000) continue;
      for (GroupedEpilogue epilogue : {GroupedEpilogue::kBias, GroupedEpilogue::kActivation}) {
        for (bool bias : {false, true}) {
          GemmCase c;
          c.rows_per_expert = pattern;
          c.first_row = index % 5 == 0 ? 3 : 0;
          c.extra_rows = (index % 3) * 5;
          c.n = shape[0];
          c.k = shape[1];
          c.epilogue = epilogue;
          c.kind = kAllKinds[index % 7];
          c.bias = bias;
          cases.push_back(c);
          ++index;
        }
      }
    }
  }
  for (MoEActKind kind : kAllKinds) {
    GemmCase c;
    c.rows_per_expert = {5, 0, 20, 3};
    c.extra_rows = 4;
    c.n = 40;
    c.k = 64;
    c.epilogue = GroupedEpilogue::kActivation;
    c.kind = kind;
    c.bias = true;
    cases.push_back(c);
  }
  return cases;
}

template <typename T>
void check_grid(double tolerance) {
  uint32_t seed = 4200;
  for (const GemmCase& c : case_grid()) {
    SCOPED_TRACE(c.describe());
    bool untouched = false;
    const double err = run_case<T>(c, ++seed, untouched);
    EXPECT_LT(err, tolerance);
    EXPECT_TRUE(untouched) << "a row outside the experts' rows was written";
  }
}

TEST(CudaGroupedGemm, MatchesReference) {
  MG_REQUIRE_GPU();
  for (const testing::DtypeTolerance& d : testing::cuda_dtypes()) {
    SCOPED_TRACE(dtype_name(d.dtype));
    if (d.dtype == DType::kBF16) {
      check_grid<__nv_bfloat16>(d.tolerance);
    } else if (d.dtype == DType::kF16) {
      check_grid<__half>(d.tolerance);
    } else if (d.dtype == DType::kF32) {
      check_grid<float>(d.tolerance);
    } else {
      ADD_FAILURE() << "no grouped GEMM for " << dtype_name(d.dtype);
    }
  }
}

// Every kernel on every case of the grid that it can run (grouped_gemm_kernel_check: mma16 any,
// mma32/mma128 plain, mma64 gated, wgmma/tma on sm_90a, tma where its boxes fit, ffma F32); the
// ones it cannot run are refused by the launcher with an error, never run wrong.
template <typename T>
void check_grid_every_kernel(double tolerance, std::set<std::string>& ran) {
  uint32_t seed = 4600;
  for (const GemmCase& c : case_grid()) {
    for (cuda::GroupedGemmKernel kernel : cuda::kAllGroupedGemmKernels) {
      SCOPED_TRACE(c.describe() + " kernel " + std::string(cuda::grouped_gemm_kernel_name(kernel)));
      const std::string why = grouped_gemm_kernel_check(kernel, problem_of<T>(c), this_gpu());
      bool untouched = false;
      if (!why.empty()) {
        // (Without rows nothing launches, so nothing is refused.)
        if (problem_of<T>(c).max_rows > 0) {
          EXPECT_THROW(run_case<T>(c, ++seed, untouched, kernel), Error) << why;
        }
        continue;
      }
      EXPECT_LT(run_case<T>(c, ++seed, untouched, kernel), tolerance);
      EXPECT_TRUE(untouched) << "a row outside the experts' rows was written";
      ran.insert(std::string(cuda::grouped_gemm_kernel_name(kernel)));
    }
  }
}

TEST(CudaGroupedGemm, EveryKernelMatchesReference) {
  MG_REQUIRE_GPU();
  for (const testing::DtypeTolerance& d : testing::cuda_dtypes()) {
    SCOPED_TRACE(dtype_name(d.dtype));
    std::set<std::string> ran;
    if (d.dtype == DType::kF32) {
      check_grid_every_kernel<float>(d.tolerance, ran);
      EXPECT_EQ(ran, std::set<std::string>({"ffma"}));
      continue;
    }
    if (d.dtype == DType::kBF16) {
      check_grid_every_kernel<__nv_bfloat16>(d.tolerance, ran);
    } else {
      check_grid_every_kernel<__half>(d.tolerance, ran);
    }
    std::set<std::string> expected = {"mma16", "mma32", "mma64", "mma128"};
    if (cuda::grouped_gemm_sm90a_kernels()) expected.insert({"wgmma", "tma"});
    EXPECT_EQ(ran, expected);
  }
}

// Expert 1 of 3 takes every row: the first m tiles belong to no expert and the lookup must skip
// the empty experts on both sides.
TEST(CudaGroupedGemm, OneExpertTakesAllRows) {
  MG_REQUIRE_GPU();
  GemmCase c;
  c.rows_per_expert = {0, 150, 0};
  c.n = 96;
  c.k = 64;
  c.epilogue = GroupedEpilogue::kActivation;
  c.kind = MoEActKind::kSiluGated;
  c.bias = true;
  bool untouched = false;
  EXPECT_LT(run_case<__nv_bfloat16>(c, 77, untouched), 1e-2);
  EXPECT_TRUE(untouched);
}

// Many rows per expert with N 136: on sm_90a the gated epilogue runs the TMA kernel; the plain one
// (N below the TMA kernel's 256-row weight box) runs the wgmma kernel (K = 2056) or the mma.sync
// 128 × 256 tile (K = 1544); N tails of their 128 / 256 columns and a K tail of their 64-wide
// steps.
TEST(CudaGroupedGemm, LargeTilesMatchReference) {
  MG_REQUIRE_GPU();
  const std::pair<GroupedEpilogue, int64_t> configs[] = {{GroupedEpilogue::kBias, 2056},
                                                         {GroupedEpilogue::kActivation, 2056},
                                                         {GroupedEpilogue::kBias, 1544}};
  for (const auto& [epilogue, k] : configs) {
    GemmCase c;
    c.rows_per_expert = {600, 0, 300};
    c.extra_rows = 7;
    c.n = 136;
    c.k = k;
    c.epilogue = epilogue;
    c.kind = MoEActKind::kSwigluOai;
    c.bias = true;
    SCOPED_TRACE(c.describe());
    bool untouched = false;
    EXPECT_LT(run_case<__nv_bfloat16>(c, 91, untouched), 1e-2);
    EXPECT_TRUE(untouched);
    EXPECT_LT(run_case<__half>(c, 92, untouched), 2e-3);
    EXPECT_TRUE(untouched);
  }
}

// Shapes the selection sends to the persistent TMA kernel on sm_90a (more than 16 rows per expert
// on average, N >= 256 plain / 128 gated, K >= 64, at least 64 rows): both epilogues, every
// activation, bias or not; experts with 0 and 1 rows and rows around its 64- and 128-row tile
// steps; N tails of its 256 / 128 columns (plain N 264 and 300 are not multiples of 8: the
// epilogue's element path) and K tails of its 64-wide k step; more than 128 experts; a launch
// whose experts have no rows at all (nothing may be written).
TEST(CudaGroupedGemm, TmaKernelShapesMatchReference) {
  MG_REQUIRE_GPU();
  const std::vector<std::vector<int32_t>> patterns = {
      {0, 1, 64, 65, 127, 128, 129, 300},  // both consumer warpgroups or one, several m tiles
      {70, 0, 130, 5},
  };
  const int64_t shapes[][2] = {{264, 200}, {300, 72}, {512, 1032}};
  uint32_t seed = 900;
  int index = 0;
  for (const auto& pattern : patterns) {
    for (const auto& shape : shapes) {
      for (int kind_index = 0; kind_index < 7; ++kind_index) {
        GemmCase c;
        c.rows_per_expert = pattern;
        c.first_row = index % 2 == 0 ? 3 : 0;
        c.extra_rows = (index % 3) * 4;
        c.n = shape[0];
        c.k = shape[1];
        c.kind = kAllKinds[kind_index];
        c.epilogue = kind_index == 6 && index % 2 == 0 ? GroupedEpilogue::kBias
                                                       : GroupedEpilogue::kActivation;
        c.bias = index % 2 == 1;
        ++index;
        int64_t rows = 0;
        for (int32_t r : pattern) rows += r;
        if (rows * c.n * c.k > 120'000'000) continue;  // keeps the host reference quick
        SCOPED_TRACE(c.describe());
        bool untouched = false;
        EXPECT_LT(run_case<__nv_bfloat16>(c, ++seed, untouched), 1e-2);
        EXPECT_TRUE(untouched) << "a row outside the experts' rows was written";
        if (kind_index % 3 == 0) {
          EXPECT_LT(run_case<__half>(c, ++seed, untouched), 2e-3);
          EXPECT_TRUE(untouched) << "a row outside the experts' rows was written";
        }
      }
    }
  }
  // 130 experts of 0..59 rows (the tile lookup over more than 128 experts), plain and gated.
  std::mt19937 rng(5);
  GemmCase many;
  many.rows_per_expert.resize(130);
  for (int32_t& r : many.rows_per_expert) r = static_cast<int32_t>(rng() % 60);
  many.n = 256;
  many.k = 128;
  many.bias = true;
  for (GroupedEpilogue epilogue : {GroupedEpilogue::kBias, GroupedEpilogue::kActivation}) {
    many.epilogue = epilogue;
    many.kind = MoEActKind::kSwigluOai;
    SCOPED_TRACE(many.describe());
    bool untouched = false;
    EXPECT_LT(run_case<__nv_bfloat16>(many, 71, untouched), 1e-2);
    EXPECT_TRUE(untouched);
  }
  // No expert has rows; 80 rows of the buffer around them must keep the poison.
  GemmCase empty;
  empty.rows_per_expert = {0, 0, 0};
  empty.extra_rows = 80;
  empty.n = 256;
  empty.k = 64;
  empty.epilogue = GroupedEpilogue::kActivation;
  empty.kind = MoEActKind::kSiluGated;
  bool untouched = false;
  run_case<__nv_bfloat16>(empty, 72, untouched);
  EXPECT_TRUE(untouched);
}

TEST(CudaGroupedGemm, CheckNamesUnsupportedShapes) {
  EXPECT_EQ(cuda::grouped_gemm_check(2880, 2880), "");
  EXPECT_EQ(cuda::grouped_gemm_check(8, 8), "");
  EXPECT_NE(cuda::grouped_gemm_check(64, 12).find("multiple of 8"), std::string::npos);
  EXPECT_NE(cuda::grouped_gemm_check(0, 64), "");
  EXPECT_NE(cuda::grouped_gemm_check(64, 0), "");
}

#endif  // MG_WITH_CUDA

}  // namespace
}  // namespace mg
