#include "ops/moe/heuristics/fp8_kernel_choice.h"

#include <fmt/format.h>

#include "framework/core/error.h"

namespace mg {

namespace {

constexpr Fp8Kernel kAll[] = {Fp8Kernel::kDecode, Fp8Kernel::kMma16, Fp8Kernel::kMma64,
                              Fp8Kernel::kWgmma,  Fp8Kernel::kTma,   Fp8Kernel::kTma64};

// Rows of the table, in order; the first that holds decides.
//   D1  M <= 8: decode. The unquantized table's row P1 (its decode kernels beat the grouped
//       pipeline up to 8 tokens on every shape of `bench moe`) carried over: the FP8 tables of
//       docs/performance.md time the decode kernels at M = 1 only, so this threshold is the
//       unquantized one, not a measured FP8 one.
//   G1  rows per expert <= 16 and one of: at most 1 row per expert, experts under
//       kFp8SmallExpertBytes (16 MiB) of codes, no sm_90a code: fp8_mma16 (16-row tiles: no
//       wasted rows; more, narrower CTAs stream the weights). Larger experts take G2 from 2 rows
//       on: `bench moe --quant fp8-block --kernel fp8_mma16,fp8_tma64 --tokens 32,64,128,256,512
//       --target-ms 50 --no-check` (H200, 2026-12-02, docs/performance.md), µs mma16 vs tma64 at
//       2 / 4 / 8 / 16 rows: deepseek-v3 (42 MiB an expert) 2540 / 2939 / 3072 / 4193 vs 2350 /
//       2711 / 2967 / 3616, gpt-oss-120b (23.7 MiB) 923 / 922 / 963 / 1288 vs 790 / 867 / 907 /
//       1078, mixtral (168 MiB) at 8 / 16 rows 443 / 559 vs 411 / 440; at 1 row deepseek-v3 1808
//       vs 1777 and gpt-oss-120b 600 vs 651; qwen3-30b-a3b (4.5 MiB) keeps mma16 at every point
//       (2 / 4 / 8 / 16 rows: 194 / 202 / 212 / 282 vs 213 / 245 / 306 / 369); its GEMMs have
//       only 6 and 16 K blocks a tile, so presumably a mostly empty 64-row tile's fixed costs
//       outweigh its wider loads there (not profiled).
//   G2  otherwise rows per expert <= 64 on sm_90a: fp8_tma64 (64-row tiles, two pipelines a
//       CTA). It beat fp8_tma at every point up to 64 rows an expert and tied at 64 (`bench moe
//       --quant fp8-block --kernel auto,fp8_tma,fp8_tma64 --tokens
//       64,128,256,512,1024,2048,4096,8192`, H200, 2026-12-02, docs/performance.md), e.g. at 32
//       rows deepseek-v3 (M=1024) 4067 vs 5280 us, gpt-oss-120b (M=1024) 1193 vs 1657,
//       qwen3-30b-a3b (M=512) 399 vs 557, mixtral (M=128) 458 vs 575; at 64 rows mixtral 699 vs
//       690. Above 64 rows the shapes split (128: qwen3 759 vs 838, mixtral 1045 vs 1008; 256:
//       qwen3 1326 vs 1404, mixtral 1706 vs 1643).
//   G3  otherwise fp8_tma on sm_90a (the expert MLP runs a GEMM whose shape its TMA boxes do
//       not fit on fp8_wgmma). fp8_wgmma first took this row over fp8_mma64 (`bench moe --quant
//       fp8-block --backend cuda_fp8:fp8_mma64,cuda_fp8:fp8_wgmma`, H100, 2026-11-25: deepseek-v3
//       M=256 6194 vs 7643 us, M=4096 10512 vs 19917; mixtral M=256 962 vs 1734, M=4096 7214 vs
//       15869); fp8_tma then beat fp8_wgmma at every point timed (`bench moe --quant fp8-block
//       --shape mixtral,qwen3-30b-a3b,deepseek-v3,gpt-oss-120b --tokens 256,1024,4096 --kernel
//       fp8_wgmma,fp8_tma`, H200, 2026-12-02, docs/performance.md), e.g. mixtral M=256 (64 rows
//       an expert) 646 vs 925 us, M=4096 5463 vs 7155; deepseek-v3 M=4096 8232 vs 10737.
//   G4  otherwise (no sm_90a code) fp8_mma64.
Fp8Choice rule_choice(const Fp8Problem& p, int64_t tokens) {
  if (tokens <= kFp8DecodeMaxTokens) return {Fp8Kernel::kDecode, "D1: M <= 8"};
  const int64_t rows = tokens * p.top_k, experts = std::max<int64_t>(1, p.local_experts);
  if (rows <= 16 * experts) {
    if (rows <= experts) return {Fp8Kernel::kMma16, "G1: <= 1 row per expert"};
    if (!p.sm90a_kernels) {
      return {Fp8Kernel::kMma16, "G1: <= 16 rows per expert, no sm_90a kernels"};
    }
    if (p.expert_code_bytes < kFp8SmallExpertBytes) {
      return {Fp8Kernel::kMma16, "G1: <= 16 rows per expert, experts under 16 MiB"};
    }
  }
  if (!p.sm90a_kernels) return {Fp8Kernel::kMma64, "G4: > 16 rows per expert, no sm_90a kernels"};
  if (rows <= 64 * experts) {
    return {Fp8Kernel::kTma64, "G2: <= 64 rows per expert, sm_90a"};
  }
  return {Fp8Kernel::kTma, "G3: > 64 rows per expert, sm_90a"};
}

}  // namespace

std::string_view fp8_kernel_name(Fp8Kernel kernel) {
  switch (kernel) {
    case Fp8Kernel::kDecode:
      return "fp8_decode";
    case Fp8Kernel::kMma16:
      return "fp8_mma16";
    case Fp8Kernel::kMma64:
      return "fp8_mma64";
    case Fp8Kernel::kWgmma:
      return "fp8_wgmma";
    case Fp8Kernel::kTma:
      return "fp8_tma";
    case Fp8Kernel::kTma64:
      return "fp8_tma64";
  }
  return "?";
}

std::vector<std::string> fp8_kernel_request_names() {
  std::vector<std::string> names = {"auto"};
  for (Fp8Kernel k : kAll) names.emplace_back(fp8_kernel_name(k));
  return names;
}

std::optional<Fp8Kernel> parse_fp8_kernel_request(std::string_view name) {
  if (name.empty() || name == "auto") return std::nullopt;
  for (Fp8Kernel k : kAll) {
    if (fp8_kernel_name(k) == name) return k;
  }
  MG_FAIL("unknown FP8 MoE kernel '{}' (known: {})", name,
          fmt::join(fp8_kernel_request_names(), ", "));
}

std::string check_fp8_kernel_request(const Fp8Problem& p, std::optional<Fp8Kernel> request) {
  const bool wgmma =
      request == Fp8Kernel::kWgmma || request == Fp8Kernel::kTma || request == Fp8Kernel::kTma64;
  if (wgmma && !p.sm90a_kernels) {
    return fmt::format("{} needs the sm_90a kernels, which this GPU or build lacks",
                       fp8_kernel_name(*request));
  }
  // fp8_wgmma: on an H100 (2026-11-25) it gave exact sums bit for bit
  // (CudaFp8Experts.GroupedGemmExactSumsEveryKernel) and its GEMMs and MLP stay within the
  // accumulation allowance of Hopper's FP8 wgmma (about 14 bits inside a 128-wide K block before
  // each promotion into fp32, as in DeepGEMM; tests/cuda/fp8_experts_cuda_test.cc).
  return {};
}

Fp8Choice choose_fp8_kernel(const Fp8Problem& p, int64_t tokens, std::optional<Fp8Kernel> request) {
  if (!request) return rule_choice(p, tokens);
  const std::string why = check_fp8_kernel_request(p, request);
  MG_CHECK(why.empty(), "cuda_fp8:{}: {}", fp8_kernel_name(*request), why);
  MG_CHECK(*request != Fp8Kernel::kDecode || tokens <= kFp8DecodeMaxTokens,
           "cuda_fp8:fp8_decode takes at most {} tokens per forward, got {} (lower --max-tokens "
           "or let the backend choose)",
           kFp8DecodeMaxTokens, tokens);
  return {*request, "requested"};
}

}  // namespace mg
