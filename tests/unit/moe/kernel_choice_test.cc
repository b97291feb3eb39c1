// The CUDA kernel choice of unquantized experts (ops/moe/heuristics/unquantized_kernel_choice.h)
// as a table, no GPU needed: the choices for the four `bench moe` shapes over its token grid are
// pinned to what the code chose before the choice moved into one unit (read off fused_path and
// launch_mma_by_size), with and without the sm_90a kernels, and to the measured changes since
// (row G4's plain GEMM2 of 13..16 rows); the rows' boundaries; requests and their refusals.
#include "ops/moe/heuristics/unquantized_kernel_choice.h"

#include <array>
#include <string>

#include <gtest/gtest.h>

#include "framework/core/error.h"

namespace mg {
namespace {

using cuda::GroupedGemmKernel;

constexpr std::array<int64_t, 7> kBenchTokens = {1, 16, 64, 256, 1024, 4096, 16384};

struct PinnedShape {
  const char* name;
  int64_t hidden, inter, experts, top_k;
  std::array<const char*, 7> choice;  // per kBenchTokens
};

CudaMoEProblem problem_of(const PinnedShape& s, DType dtype = DType::kBF16, bool gated = true) {
  return {s.experts, s.hidden, s.inter, s.top_k, gated, dtype};
}

const CudaDeviceTraits kH100{90, 132, true};
const CudaDeviceTraits kNoSm90a{90, 132, false};

// moe_bench_shapes() (ops/moe/bench/moe_bench_cuda.cc), SiLU-gated.
constexpr PinnedShape kPinnedH100[] = {
    {"mixtral",
     4096,
     14336,
     8,
     2,
     {"decode", "grouped_mma16+mma16", "grouped_mma16+mma32", "grouped_tma+tma", "cublas", "cublas",
      "cublas"}},
    {"qwen3-30b-a3b",
     2048,
     768,
     128,
     8,
     {"decode", "grouped_mma16+mma16", "grouped_mma16+mma16", "grouped_mma16+mma32",
      "grouped_tma+tma", "grouped_tma+tma", "grouped_tma+tma"}},
    {"deepseek-v3",
     7168,
     2048,
     256,
     8,
     {"decode", "grouped_mma16+mma16", "grouped_mma16+mma16", "grouped_mma16+mma16",
      "grouped_tma+tma", "grouped_wgmma+tma", "cublas"}},
    {"gpt-oss-120b",
     2880,
     2880,
     128,
     4,
     {"decode", "grouped_mma16+mma16", "grouped_mma16+mma16", "grouped_mma16+mma16",
      "grouped_tma+tma", "grouped_tma+tma", "cublas"}},
};

constexpr PinnedShape kPinnedWithoutSm90a[] = {
    {"mixtral",
     4096,
     14336,
     8,
     2,
     {"decode", "grouped_mma16+mma16", "grouped_mma16+mma32", "grouped_mma64+mma32", "cublas",
      "cublas", "cublas"}},
    {"qwen3-30b-a3b",
     2048,
     768,
     128,
     8,
     {"decode", "grouped_mma16+mma16", "grouped_mma16+mma16", "grouped_mma16+mma32",
      "grouped_mma64+mma32", "grouped_mma64+mma32", "grouped_mma64+mma32"}},
    {"deepseek-v3",
     7168,
     2048,
     256,
     8,
     {"decode", "grouped_mma16+mma16", "grouped_mma16+mma16", "grouped_mma16+mma16",
      "grouped_mma64+mma32", "grouped_mma64+mma128", "cublas"}},
    {"gpt-oss-120b",
     2880,
     2880,
     128,
     4,
     {"decode", "grouped_mma16+mma16", "grouped_mma16+mma16", "grouped_mma16+mma16",
      "grouped_mma64+mma32", "grouped_mma64+mma128", "cublas"}},
};

std::string auto_choice(const CudaMoEProblem& p, int64_t M, const CudaDeviceTraits& d) {
  return choose_cuda_kernels(p, M, d, CudaKernelRequest{}).name();
}

TEST(KernelChoice, BenchShapesOnH100KeepTodaysChoice) {
  for (const PinnedShape& s : kPinnedH100) {
    for (size_t i = 0; i < kBenchTokens.size(); ++i) {
      EXPECT_EQ(auto_choice(problem_of(s), kBenchTokens[i], kH100), s.choice[i])
          << s.name << " M=" << kBenchTokens[i];
    }
  }
}

TEST(KernelChoice, BenchShapesWithoutSm90aKeepTodaysChoice) {
  for (const PinnedShape& s : kPinnedWithoutSm90a) {
    for (size_t i = 0; i < kBenchTokens.size(); ++i) {
      EXPECT_EQ(auto_choice(problem_of(s), kBenchTokens[i], kNoSm90a), s.choice[i])
          << s.name << " M=" << kBenchTokens[i];
    }
  }
}

TEST(KernelChoice, F32RunsTheFfmaKernelOnTheGroupedPipeline) {
  const PinnedShape& qwen = kPinnedH100[1];
  EXPECT_EQ(auto_choice(problem_of(qwen, DType::kF32), 1, kH100), "decode");
  EXPECT_EQ(auto_choice(problem_of(qwen, DType::kF32), 4096, kH100), "grouped_ffma+ffma");
  EXPECT_EQ(auto_choice(problem_of(kPinnedH100[0], DType::kF32), 1024, kH100), "cublas");
}

TEST(KernelChoice, DecodeUpToFiveTokens) {
  const CudaMoEProblem p = problem_of(kPinnedH100[1]);
  EXPECT_EQ(auto_choice(p, kAutoDecodeMaxTokens, kH100), "decode");
  EXPECT_EQ(auto_choice(p, kAutoDecodeMaxTokens + 1, kH100), "grouped_mma16+mma16");
  EXPECT_EQ(auto_choice(p, 9, kH100), "grouped_mma16+mma16");
  std::string why;
  choose_cuda_kernels(p, kAutoDecodeMaxTokens, kH100, {}, &why);
  EXPECT_EQ(why.substr(0, 12), "pipeline P1 ") << why;
  EXPECT_NE(why.find("moegraph bench moe"), std::string::npos) << why;
  choose_cuda_kernels(p, 9, kH100, {}, &why);
  EXPECT_NE(why.find("; GEMM1 G4 (gated <= 16 rows, plain <= 12 rows -> mma16;"), std::string::npos)
      << why;
  EXPECT_NE(why.find("; GEMM2 G4 "), std::string::npos) << why;
}

// A plain GEMM2 of 13 to 16 rows an expert takes mma32 (row G7), the gated GEMM1 stays on mma16
// (G4) up to 16: qwen3-30b-a3b at 208 tokens (13 rows) and 256 (16); 192 tokens (12) keep mma16.
TEST(KernelChoice, PlainGemm2FromThirteenRowsTakesMma32) {
  const CudaMoEProblem p = problem_of(kPinnedH100[1]);
  EXPECT_EQ(auto_choice(p, 192, kH100), "grouped_mma16+mma16");
  EXPECT_EQ(auto_choice(p, 208, kH100), "grouped_mma16+mma32");
  EXPECT_EQ(auto_choice(p, 256, kH100), "grouped_mma16+mma32");
  EXPECT_EQ(auto_choice(p, 272, kH100), "grouped_tma+tma");  // 17 rows: TMA boxes (G3)
  std::string why;
  choose_cuda_kernels(p, 208, kH100, {}, &why);
  EXPECT_NE(why.find("; GEMM2 G7 "), std::string::npos) << why;
}

TEST(KernelChoice, CublasRowsAtTheirThresholds) {
  // mixtral: 8 experts, k 2, GEMM1 2 rows · 28672 · 4096 flop: 128 rows per expert at M 512.
  const CudaMoEProblem mixtral = problem_of(kPinnedH100[0]);
  EXPECT_EQ(auto_choice(mixtral, 511, kH100), "grouped_tma+tma");
  std::string why;
  EXPECT_EQ(choose_cuda_kernels(mixtral, 512, kH100, {}, &why).name(), "cublas");  // 30 GFLOP
  EXPECT_EQ(why.substr(0, 12), "pipeline P2 ") << why;
  // A small-expert shape with < 128 experts between 4 and 12 GFLOP: P3.
  const CudaMoEProblem mid{64, 2048, 1024, 8, true, DType::kBF16};   // 128 rows at M 1024: 1.07
  EXPECT_EQ(auto_choice(mid, 1024, kH100), "grouped_tma+tma");       // GFLOP: below 4
  const CudaMoEProblem mid4{64, 4096, 2048, 8, true, DType::kBF16};  // 4.3 GFLOP at 128 rows
  EXPECT_EQ(choose_cuda_kernels(mid4, 1024, kH100, {}, &why).name(), "cublas");
  EXPECT_EQ(why.substr(0, 12), "pipeline P3 ") << why;
  // The same with 128 experts stays grouped.
  const CudaMoEProblem many{128, 4096, 2048, 8, true, DType::kBF16};
  EXPECT_EQ(auto_choice(many, 2048, kH100), "grouped_wgmma+tma");
}

TEST(KernelChoice, GroupedGemmRowsPerKernel) {
  std::string why;
  // Gated long K, 128..512 rows: wgmma (G2); 513 rows: tma (G3).
  GroupedGemmProblem g{2048, 7168, 128 * 256, 256, true, DType::kBF16};
  EXPECT_EQ(choose_grouped_gemm_kernel(g, kH100, &why), GroupedGemmKernel::kWgmma);
  EXPECT_EQ(why.substr(0, 2), "G2");
  g.max_rows = 513 * 256;
  EXPECT_EQ(choose_grouped_gemm_kernel(g, kH100, &why), GroupedGemmKernel::kTma);
  EXPECT_EQ(why.substr(0, 2), "G3");
  // Plain N below TMA's 256-row box: the mma tiles by rows and K.
  GroupedGemmProblem small{128, 4096, 64 * 100, 100, false, DType::kBF16};
  EXPECT_EQ(choose_grouped_gemm_kernel(small, kH100, &why), GroupedGemmKernel::kMma32);
  small.max_rows = 65 * 100;
  EXPECT_EQ(choose_grouped_gemm_kernel(small, kH100, &why), GroupedGemmKernel::kWgmma);
  small.k = 2048;
  EXPECT_EQ(choose_grouped_gemm_kernel(small, kH100, &why), GroupedGemmKernel::kMma128);
  // Gated N below the gated box (128): mma64 up to 256 rows, then wgmma at long K.
  GroupedGemmProblem gated_small{64, 4096, 256 * 10, 10, true, DType::kBF16};
  EXPECT_EQ(choose_grouped_gemm_kernel(gated_small, kH100, &why), GroupedGemmKernel::kMma64);
  gated_small.max_rows = 257 * 10;
  EXPECT_EQ(choose_grouped_gemm_kernel(gated_small, kH100, &why), GroupedGemmKernel::kWgmma);
  EXPECT_EQ(choose_grouped_gemm_kernel(gated_small, kNoSm90a, &why), GroupedGemmKernel::kMma64);
  EXPECT_EQ(why.substr(0, 2), "G5");
}

TEST(KernelChoice, ParsesEveryRequestName) {
  for (const std::string& name : kernel_request_names()) {
    EXPECT_EQ(parse_cuda_kernel_request(name).str(), name);
  }
  const CudaKernelRequest pair = parse_cuda_kernel_request("grouped_mma64+mma32");
  EXPECT_EQ(pair.pipeline, CudaMoEPipeline::kGrouped);
  EXPECT_EQ(pair.gemm1, GroupedGemmKernel::kMma64);
  EXPECT_EQ(pair.gemm2, GroupedGemmKernel::kMma32);
  EXPECT_EQ(pair.str(), "grouped_mma64+mma32");
  EXPECT_TRUE(parse_cuda_kernel_request("").is_auto());
  EXPECT_TRUE(parse_cuda_kernel_request("auto").is_auto());
  try {
    parse_cuda_kernel_request("grouped_mma48");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("grouped_tma"), std::string::npos) << e.what();
  }
  EXPECT_THROW(parse_cuda_kernel_request("grouped_tma+"), Error);
  EXPECT_THROW(parse_cuda_kernel_request("fused"), Error);
}

TEST(KernelChoice, ForcedKernelsRunOrSayWhyNot) {
  const CudaMoEProblem qwen = problem_of(kPinnedH100[1]);
  // Forced choices win over the table (which picks decode for 8 tokens).
  auto forced = [&](const char* name, int64_t M) {
    std::string why;
    const CudaKernelChoice c =
        choose_cuda_kernels(qwen, M, kH100, parse_cuda_kernel_request(name), &why);
    EXPECT_NE(why.find("forced"), std::string::npos) << why;
    return c.name();
  };
  EXPECT_EQ(forced("grouped_tma", 8), "grouped_tma+tma");  // 64 rows: TMA's A box
  EXPECT_EQ(forced("cublas", 1), "cublas");
  EXPECT_EQ(forced("grouped", 1), "grouped_mma16+mma16");
  EXPECT_EQ(forced("grouped_wgmma+mma128", 2), "grouped_wgmma+mma128");
  EXPECT_EQ(forced("decode", 16), "decode");
}

TEST(KernelChoice, RefusedRequestsSayWhy) {
  const CudaMoEProblem qwen = problem_of(kPinnedH100[1]);
  auto refusal = [&](const char* name, const CudaDeviceTraits& d, const CudaMoEProblem& p) {
    return check_cuda_kernel_request(p, d, parse_cuda_kernel_request(name));
  };
  EXPECT_EQ(refusal("grouped_tma", kH100, qwen), "");
  EXPECT_EQ(refusal("grouped_mma64+mma32", kH100, qwen), "");
  EXPECT_NE(refusal("grouped_tma", kNoSm90a, qwen).find("sm_90a"), std::string::npos);
  EXPECT_NE(refusal("grouped_wgmma", kNoSm90a, qwen).find("sm_90a"), std::string::npos);
  EXPECT_NE(refusal("grouped_mma32", kH100, qwen).find("GEMM1: mma32 has no gated tile"),
            std::string::npos)
      << refusal("grouped_mma32", kH100, qwen);
  EXPECT_NE(refusal("grouped_mma64", kH100, qwen).find("GEMM2: mma64 has a gated tile only"),
            std::string::npos);
  EXPECT_NE(refusal("grouped_ffma", kH100, qwen).find("F32 only"), std::string::npos);
  EXPECT_NE(refusal("grouped_mma16", kH100, problem_of(kPinnedH100[1], DType::kF32)).find("ffma"),
            std::string::npos);
  // TMA boxes: N 96 < 128 gated rows.
  const CudaMoEProblem narrow{4, 64, 96, 2, true, DType::kBF16};
  EXPECT_NE(refusal("grouped_tma", kH100, narrow).find("boxes do not fit"), std::string::npos);
  // Plain activation: the plain tiles take GEMM1 too.
  const CudaMoEProblem plain = problem_of(kPinnedH100[1], DType::kBF16, /*gated=*/false);
  EXPECT_EQ(refusal("grouped_mma32", kH100, plain), "");
  EXPECT_EQ(refusal("grouped_mma128", kH100, plain), "");
  EXPECT_NE(refusal("grouped_mma64", kH100, plain), "");

  // Token-dependent refusals come from the choice itself.
  try {
    choose_cuda_kernels(qwen, 17, kH100, parse_cuda_kernel_request("decode"));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("at most 16 tokens"), std::string::npos) << e.what();
  }
  const CudaMoEProblem mixtral = problem_of(kPinnedH100[0]);  // k 2: 31 tokens = 62 rows
  try {
    choose_cuda_kernels(mixtral, 31, kH100, parse_cuda_kernel_request("grouped_tma"));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("at least 64 rows"), std::string::npos) << e.what();
  }
  EXPECT_EQ(
      choose_cuda_kernels(mixtral, 32, kH100, parse_cuda_kernel_request("grouped_tma")).name(),
      "grouped_tma+tma");
}

}  // namespace
}  // namespace mg
