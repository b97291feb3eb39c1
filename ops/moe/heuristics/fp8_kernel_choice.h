// Which CUDA kernels run the routed experts of an FP8 (W8A8) MoE layer: the one place that
// decides, for the `cuda_fp8` backend (ops/moe/experts/cuda_fp8_experts.h), beside
// unquantized_kernel_choice.h for the unquantized scheme.
//
// A forward makes one choice from the tokens M and the shape (fp8_kernel_choice.cc, kRules):
//   fp8_decode                      quantize x -> up + act -> quantize h -> down + combine, per
//                                   (token, expert) pair, every touched expert's weights read once
//   fp8_mma16 | fp8_mma64           align -> quantize-gather -> grouped GEMM1 + act ->
//                                   quantize h -> grouped GEMM2 -> combine, on that GEMM kernel
//   fp8_wgmma                       the same on wgmma (sm_90a), fed by cp.async
//   fp8_tma                         the same wgmma tile fed by TMA, warp-specialised and
//                                   persistent (sm_90a); a GEMM whose shape its boxes do not fit
//                                   runs fp8_wgmma
//   fp8_tma64                       fp8_tma's kernel on 64-row tiles, two pipelines a CTA
// The table takes fp8_decode at M = 1 and, on sm_90a, fp8_tma64 up to 64 rows per expert (from
// 2 rows when an expert has at least kFp8SmallExpertBytes of codes and there are at least
// kFp8TmaMinRows rows, else from 17) and fp8_tma above (the bench's numbers in the .cc).
// A request (`cuda_fp8:NAME`, one of the names above, or `auto`) forces it; a forced kernel that
// cannot run is an error saying why.
//
// Plain C++ (no CUDA): the CPU build compiles and tests the rules.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mg {

enum class Fp8Kernel { kDecode, kMma16, kMma64, kWgmma, kTma, kTma64 };

std::string_view fp8_kernel_name(Fp8Kernel kernel);
// "auto" and every kernel name.
std::vector<std::string> fp8_kernel_request_names();
// nullopt for "" or "auto"; throws mg::Error listing the names for anything else unknown.
std::optional<Fp8Kernel> parse_fp8_kernel_request(std::string_view name);

// The most tokens the decode kernels take (= cuda::kFp8DecodeMaxTokens, checked where the CUDA
// header is visible).
inline constexpr int64_t kFp8DecodeMaxTokens = 8;
// The most tokens the table sends to the decode kernels (fp8_kernel_choice.cc, row D1).
inline constexpr int64_t kFp8DecodeChosenTokens = 1;
// The fewest rows (M k) the TMA kernels' 64-row A boxes fit (= fp8_tma_shape_check's bound,
// checked where the CUDA header is visible); the table sends fewer to fp8_mma16.
inline constexpr int64_t kFp8TmaMinRows = 64;

struct Fp8Problem {
  int64_t local_experts = 0;
  int64_t top_k = 0;
  bool sm90a_kernels = true;      // the loaded binary holds the sm_90a code (wgmma)
  int64_t expert_code_bytes = 0;  // one expert's FP8 weight codes, w13 and w2 (H · (w13 rows + I))
};

// Experts with fewer FP8 weight bytes than this keep the 16-row mma tiles up to 16 rows an expert
// (fp8_kernel_choice.cc, row G1).
inline constexpr int64_t kFp8SmallExpertBytes = int64_t{16} << 20;

struct Fp8Choice {
  Fp8Kernel kernel;
  std::string why;  // the rule (or request) that chose it, for logs and tests
};

// The kernel for M tokens, or the forced one. Throws mg::Error when the forced kernel cannot run
// M tokens (decode beyond kFp8DecodeMaxTokens, wgmma without the sm_90a code).
Fp8Choice choose_fp8_kernel(const Fp8Problem& problem, int64_t tokens,
                            std::optional<Fp8Kernel> request);

// "" when `request` can run on this problem for some token count, else why.
std::string check_fp8_kernel_request(const Fp8Problem& problem, std::optional<Fp8Kernel> request);

}  // namespace mg
