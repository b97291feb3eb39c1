#include "ops/moe/heuristics/fp8_kernel_choice.h"

#include <fmt/format.h>

#include "framework/core/error.h"

namespace mg {

namespace {

constexpr Fp8Kernel kAll[] = {Fp8Kernel::kDecode, Fp8Kernel::kMma16, Fp8Kernel::kMma64,
                              Fp8Kernel::kWgmma,  Fp8Kernel::kTma,   Fp8Kernel::kTma64};

// Rows of the table, in order; the first that holds decides. "rows" are the (token, expert)
// pairs M k; the timings quoted are `bench moe --quant fp8-block --kernel
// auto,fp8_mma16,fp8_tma64,fp8_tma --tokens 1,2,4,8,16,32,64,128,256 --target-ms 30 --no-check`
// (H200, 2026-12-02, session 17, docs/performance.md) unless a row says otherwise.
//   D1  M = 1: decode. It beat fp8_mma16 at M = 1 on every shape (µs: mixtral 143 vs 218,
//       qwen3-30b-a3b 42 vs 52, deepseek-v3 135 vs 136, gpt-oss-120b 66 vs 75) and lost from
//       M = 4 on every shape (M = 8: 646 vs 350, 185 vs 113, 997 vs 654, 349 vs 246); at M = 2 it
//       won on the largest experts only (mixtral 215 vs 229, deepseek-v3 259 vs 263; qwen3 67 vs
//       60, gpt-oss-120b 110 vs 93), too close to split by expert size.
//   G1  rows per expert <= 16 and one of: at most 1 row per expert, fewer than kFp8TmaMinRows
//       rows, experts under kFp8SmallExpertBytes (16 MiB) of codes, no sm_90a code: fp8_mma16
//       (16-row tiles: no wasted rows; more, narrower CTAs stream the weights). Larger experts
//       take G2 from 2 rows an expert when there are 64 rows or more: deepseek-v3 (42 MiB an
//       expert) at 2 / 4 / 8 rows 2321 / 2684 / 3087 vs mma16's 2696 / 3322 / 3689, gpt-oss-120b
//       (23.7 MiB) 746 / 841 / 912 vs 787 / 896 / 919, mixtral (168 MiB) at 8 / 16 rows 410 / 441
//       vs 436 / 561. Below 64 rows the TMA boxes do not fit the GEMMs (fp8_tma_shape_check) and
//       the MLP runs them on fp8_wgmma: mixtral at 2 / 4 rows (16 / 32 rows in all) 666 / 732 vs
//       mma16's 350 / 387. qwen3-30b-a3b (4.5 MiB) keeps mma16 at every point (2 / 4 / 8 / 16
//       rows: 189 / 200 / 210 / 279 vs 209 / 244 / 303 / 369); its GEMMs have only 6 and 16 K
//       blocks a tile, so presumably a mostly empty 64-row tile's fixed costs outweigh its wider
//       loads there (not profiled).
//   G2  otherwise rows per expert <= 64 on sm_90a: fp8_tma64 (64-row tiles, two pipelines a
//       CTA). It beat fp8_tma at every point up to 64 rows an expert and tied at 64 (`bench moe
//       --quant fp8-block --kernel auto,fp8_tma,fp8_tma64 --tokens
//       64,128,256,512,1024,2048,4096,8192`, H200, 2026-12-02, session 16), e.g. at 32
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
//       fp8_wgmma,fp8_tma`, H200, 2026-12-02, session 15), e.g. mixtral M=256 (64 rows
//       an expert) 646 vs 925 us, M=4096 5463 vs 7155; deepseek-v3 M=4096 8232 vs 10737.
//   G4  otherwise (no sm_90a code) fp8_mma64.
Fp8Choice rule_choice(const Fp8Problem& p, int64_t tokens) {
  if (tokens <= kFp8DecodeChosenTokens) return {Fp8Kernel::kDecode, "D1: M = 1"};
  const int64_t rows = tokens * p.top_k, experts = std::max<int64_t>(1, p.local_experts);
  if (rows <= 16 * experts) {
    if (rows <= experts) return {Fp8Kernel::kMma16, "G1: <= 1 row per expert"};
    if (!p.sm90a_kernels) {
      return {Fp8Kernel::kMma16, "G1: <= 16 rows per expert, no sm_90a kernels"};
    }
    if (rows < kFp8TmaMinRows) {
      return {Fp8Kernel::kMma16, "G1: <= 16 rows per expert, fewer rows than a TMA box"};
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
