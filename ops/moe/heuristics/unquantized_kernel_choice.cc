#include "ops/moe/heuristics/unquantized_kernel_choice.h"

#include <algorithm>
#include <span>

#include "framework/core/error.h"

namespace mg {

namespace {

using cuda::GroupedGemmKernel;

// ---- 1. The pipeline -------------------------------------------------------------------------
//
// Rows are tried in order; the first that applies wins. "rows" is the average rows per local
// expert M k / E_local, "GEMM1 flop" one expert's 2 · rows · N1 · H. Every row names the
// measurement behind its threshold: the `moegraph bench moe` command that compares the kernels
// (H100, BF16; docs/performance.md "One MoE layer" has the run's setup and the cuda_moe tables).

struct PipelineInputs {
  int64_t M;
  int64_t experts;  // max(1, E_local)
  double rows;
  double gemm1_flop;
};

struct PipelineRule {
  const char* id;
  const char* when;
  CudaMoEPipeline pipeline;
  const char* evidence;
  bool (*applies)(const PipelineInputs&);
};

constexpr PipelineRule kPipelineRules[] = {
    {"P1", "M <= 5 tokens", CudaMoEPipeline::kDecode,
     "on an H200 the grouped GEMMs overtake the decode kernels at 6 tokens (qwen3-30b-a3b 5 tokens "
     "decode 112.7 / grouped 119.7 us, 6: 132.9 / 130.0, 8: 161.7 / 155.1), and the whole model "
     "agrees (`bench serve q48 --batch 6,8`: 676 -> 703 and 776 -> 826 tokens/s): `moegraph bench "
     "moe --tokens 5,6,8 --kernel decode,grouped`",
     [](const PipelineInputs& in) { return in.M <= kAutoDecodeMaxTokens; }},
    {"P2", ">= 128 rows per expert and GEMM1 >= 12 GFLOP per expert", CudaMoEPipeline::kCublas,
     "per-expert cuBLASLt beats the TMA grouped GEMMs there (gpt-oss-120b 16384 tokens 6.8 vs "
     "7.0 ms, mixtral 1024 1.5 vs 1.8 ms, deepseek-v3 16384 22.1 vs 25.2 ms): `moegraph bench moe "
     "--shape gpt-oss-120b,mixtral,deepseek-v3 --tokens 1024,16384 --kernel grouped,cublas`",
     [](const PipelineInputs& in) { return in.rows >= 128 && in.gemm1_flop >= 12e9; }},
    {"P3", ">= 128 rows per expert, GEMM1 >= 4 GFLOP per expert and < 128 experts",
     CudaMoEPipeline::kCublas,
     "the rule from before the TMA grouped GEMM, not re-measured since: `moegraph bench moe "
     "--shape mixtral --tokens 256,512 --kernel grouped,cublas`",
     [](const PipelineInputs& in) {
       return in.rows >= 128 && in.gemm1_flop >= 4e9 && in.experts < 128;
     }},
    {"P4", "otherwise", CudaMoEPipeline::kGrouped,
     "with >= 128 experts of 4-12 GFLOP the grouped GEMMs beat 2 E per-expert launches "
     "(qwen3-30b-a3b 16384 tokens 2.5 vs 3.8 ms, gpt-oss-120b 4096 2.9 vs 4.0 ms, deepseek-v3 "
     "4096 9.9 vs 11.5 ms): `moegraph bench moe --tokens 4096,16384 --kernel grouped,cublas`",
     [](const PipelineInputs&) { return true; }},
};

// ---- 2. The kernel of one grouped GEMM ---------------------------------------------------------
//
// "rows" is max_rows / E_local (integer). The thresholds come from sweeps of every kernel over
// the four bench shapes on an H100 (BF16) with the kernel author's harness, which is not in the
// repository; `moegraph bench moe --kernel grouped_K1+K2` times any pair on the whole layer, and
// the rows below say which comparison re-checks them.

bool tma_boxes_fit(const GroupedGemmProblem& g) {
  return g.k >= cuda::kTmaBoxK && g.max_rows >= cuda::kTmaBoxRows &&
         g.n >= (g.gated ? cuda::kTmaWeightBoxRows / 2 : cuda::kTmaWeightBoxRows);
}

bool tma_applies(const GroupedGemmProblem& g, const CudaDeviceTraits& d) {
  return g.rows_per_expert() > 16 && tma_boxes_fit(g) && d.sm90a_kernels;
}

struct GemmRule {
  const char* id;
  const char* when;
  GroupedGemmKernel kernel;
  const char* evidence;
  bool (*applies)(const GroupedGemmProblem&, const CudaDeviceTraits&);
};

constexpr GemmRule kGroupedGemmRules[] = {
    {"G1", "F32", GroupedGemmKernel::kFfma, "the only F32 kernel (exact reference mode, no TF32)",
     [](const GroupedGemmProblem& g, const CudaDeviceTraits&) { return g.dtype == DType::kF32; }},
    {"G2", "gated, > 16 rows, TMA boxes fit, sm_90a, K >= 4096, 128..512 rows",
     GroupedGemmKernel::kWgmma,
     "16% faster than tma on deepseek-v3 at 4096 tokens, 1-9% at deepseek-v3 16384 and mixtral "
     "1024 (within noise): `moegraph bench moe --shape deepseek-v3 --tokens 4096 --kernel "
     "grouped_wgmma+tma,grouped_tma`",
     [](const GroupedGemmProblem& g, const CudaDeviceTraits& d) {
       const int64_t rows = g.rows_per_expert();
       return g.gated && tma_applies(g, d) && g.k >= 4096 && rows >= 128 && rows <= 512;
     }},
    {"G3", "> 16 rows, TMA boxes fit, sm_90a", GroupedGemmKernel::kTma,
     "380-530 TFLOP/s on the bench shapes against 175-280 for the cp.async kernels "
     "(docs/performance.md, \"Where we stand\"): `moegraph bench moe --tokens 256,1024,4096 "
     "--kernel grouped_tma,grouped_wgmma+wgmma`",
     [](const GroupedGemmProblem& g, const CudaDeviceTraits& d) { return tma_applies(g, d); }},
    {"G4", "gated <= 16 rows, plain <= 12 rows", GroupedGemmKernel::kMma16,
     "weight streaming: narrow 16-row tiles, 8 stages: `moegraph bench moe --tokens 16,64 "
     "--kernel grouped_mma16,grouped_tma`; a plain GEMM2 of 13 to 16 rows takes mma32 (G7), the "
     "layer 1-3.5% faster at 16 rows on all four bench shapes on an H200, level within the noise "
     "at 9 and 12: `moegraph bench moe --shape qwen3-30b-a3b --tokens 144,192,256 --kernel auto` "
     "(docs/performance.md)",
     [](const GroupedGemmProblem& g, const CudaDeviceTraits&) {
       return g.rows_per_expert() <= (g.gated ? 16 : 12);
     }},
    {"G5", "gated, <= 256 rows or K <= 2048 or no sm_90a", GroupedGemmKernel::kMma64,
     "the gated tile streams 2 BN weight rows, so 64 rows stay wide enough up to large problems "
     "(sm_80-class GPUs; on sm_90a only where TMA's boxes do not fit)",
     [](const GroupedGemmProblem& g, const CudaDeviceTraits& d) {
       return g.gated && (g.rows_per_expert() <= 256 || g.k <= 2048 || !d.sm90a_kernels);
     }},
    {"G6", "gated, otherwise", GroupedGemmKernel::kWgmma, "large gated problems on sm_90a",
     [](const GroupedGemmProblem& g, const CudaDeviceTraits&) { return g.gated; }},
    {"G7", "plain, <= 64 rows or K <= 1024", GroupedGemmKernel::kMma32,
     "two 32-row CTAs per SM hide each other's prologue and epilogue at short K",
     [](const GroupedGemmProblem& g, const CudaDeviceTraits&) {
       return g.rows_per_expert() <= 64 || g.k <= 1024;
     }},
    {"G8", "plain, K <= 2048 or no sm_90a", GroupedGemmKernel::kMma128,
     "the 128 x 256 mma.sync tile beat the cp.async wgmma kernel at K <= 2048",
     [](const GroupedGemmProblem& g, const CudaDeviceTraits& d) {
       return g.k <= 2048 || !d.sm90a_kernels;
     }},
    {"G9", "plain, otherwise", GroupedGemmKernel::kWgmma, "long-K plain GEMMs on sm_90a",
     [](const GroupedGemmProblem&, const CudaDeviceTraits&) { return true; }},
};

std::string rule_reason(const char* id, const char* when, std::string_view result,
                        const char* evidence) {
  return fmt::format("{} ({} -> {}; {})", id, when, result, evidence);
}

}  // namespace

std::string_view cuda_moe_pipeline_name(CudaMoEPipeline pipeline) {
  switch (pipeline) {
    case CudaMoEPipeline::kDecode:
      return "decode";
    case CudaMoEPipeline::kGrouped:
      return "grouped";
    case CudaMoEPipeline::kCublas:
      return "cublas";
  }
  return "?";
}

CudaMoEProblem CudaMoEProblem::of(const ExpertsShape& shape) {
  return {shape.num_local_experts(),       shape.hidden_size, shape.intermediate_size, shape.top_k,
          is_gated(shape.activation.kind), shape.dtype};
}

GroupedGemmProblem grouped_gemm1(const CudaMoEProblem& p, int64_t M) {
  return {p.inter, p.hidden, M * p.top_k, p.local_experts, p.gated, p.dtype};
}

GroupedGemmProblem grouped_gemm2(const CudaMoEProblem& p, int64_t M) {
  return {p.hidden, p.inter, M * p.top_k, p.local_experts, false, p.dtype};
}

// ---- Requests --------------------------------------------------------------------------------

std::string CudaKernelRequest::str() const {
  if (is_auto()) return "auto";
  const std::string_view pipe =
      cuda_moe_pipeline_name(pipeline.value_or(CudaMoEPipeline::kGrouped));
  if (!gemm1 || !gemm2) return std::string(pipe);
  if (*gemm1 == *gemm2) return fmt::format("{}_{}", pipe, cuda::grouped_gemm_kernel_name(*gemm1));
  return fmt::format("{}_{}+{}", pipe, cuda::grouped_gemm_kernel_name(*gemm1),
                     cuda::grouped_gemm_kernel_name(*gemm2));
}

std::vector<std::string> kernel_request_names() {
  std::vector<std::string> out = {"auto", "decode", "cublas", "grouped"};
  for (GroupedGemmKernel k : cuda::kAllGroupedGemmKernels) {
    out.push_back(fmt::format("grouped_{}", cuda::grouped_gemm_kernel_name(k)));
  }
  return out;
}

namespace {

std::optional<GroupedGemmKernel> kernel_by_name(std::string_view name) {
  for (GroupedGemmKernel k : cuda::kAllGroupedGemmKernels) {
    if (cuda::grouped_gemm_kernel_name(k) == name) return k;
  }
  return std::nullopt;
}

}  // namespace

CudaKernelRequest parse_cuda_kernel_request(std::string_view name) {
  CudaKernelRequest r;
  if (name.empty() || name == "auto") return r;
  if (name == "decode") {
    r.pipeline = CudaMoEPipeline::kDecode;
    return r;
  }
  if (name == "cublas") {
    r.pipeline = CudaMoEPipeline::kCublas;
    return r;
  }
  r.pipeline = CudaMoEPipeline::kGrouped;
  if (name == "grouped") return r;
  constexpr std::string_view kPrefix = "grouped_";
  if (name.substr(0, kPrefix.size()) == kPrefix) {
    const std::string_view rest = name.substr(kPrefix.size());
    const size_t plus = rest.find('+');
    const auto first = kernel_by_name(rest.substr(0, plus));
    const auto second =
        plus == std::string_view::npos ? first : kernel_by_name(rest.substr(plus + 1));
    if (first && second) {
      r.gemm1 = first;
      r.gemm2 = second;
      return r;
    }
  }
  std::string known;
  for (const std::string& n : kernel_request_names()) known += (known.empty() ? "" : ", ") + n;
  MG_FAIL(
      "unknown CUDA MoE kernel '{}' (known: {}; grouped_K1+K2 picks GEMM1's and GEMM2's kernels "
      "separately)",
      name, known);
}

std::string CudaKernelChoice::name() const {
  if (pipeline != CudaMoEPipeline::kGrouped) return std::string(cuda_moe_pipeline_name(pipeline));
  return fmt::format("grouped_{}+{}", cuda::grouped_gemm_kernel_name(gemm1),
                     cuda::grouped_gemm_kernel_name(gemm2));
}

// ---- Checks ----------------------------------------------------------------------------------

std::string grouped_gemm_kernel_check(GroupedGemmKernel kernel, const GroupedGemmProblem& g,
                                      const CudaDeviceTraits& d) {
  const std::string_view name = cuda::grouped_gemm_kernel_name(kernel);
  const bool f32 = g.dtype == DType::kF32;
  if (kernel == GroupedGemmKernel::kFfma) {
    return f32 ? std::string()
               : fmt::format(
                     "ffma runs F32 only, not {} (BF16/F16 run the mma, wgmma and tma "
                     "kernels)",
                     dtype_name(g.dtype));
  }
  if (f32) return fmt::format("{} runs BF16/F16 only; F32 runs ffma", name);
  const char* gemm = g.gated ? "a gated GEMM1"
                             : "a plain GEMM (GEMM2, or GEMM1 of a plain "
                               "activation)";
  switch (kernel) {
    case GroupedGemmKernel::kMma16:
      return {};
    case GroupedGemmKernel::kMma32:
    case GroupedGemmKernel::kMma128:
      return g.gated ? fmt::format("{} has no gated tile; {} runs mma16, mma64, wgmma or tma", name,
                                   gemm)
                     : std::string();
    case GroupedGemmKernel::kMma64:
      return g.gated ? std::string()
                     : fmt::format(
                           "{} has a gated tile only; {} runs mma16, mma32, mma128, "
                           "wgmma or tma",
                           name, gemm);
    case GroupedGemmKernel::kWgmma:
    case GroupedGemmKernel::kTma:
      if (!d.sm90a_kernels) {
        return fmt::format(
            "{} needs the sm_90a kernels (wgmma), which this GPU (sm_{}) or this build (without "
            "CUDA architecture 90a) lacks",
            name, d.sm);
      }
      if (kernel == GroupedGemmKernel::kTma && !tma_boxes_fit(g)) {
        return fmt::format(
            "tma's boxes do not fit {}: it needs K >= {} (got {}), N >= {} (got {}) and at least "
            "{} rows M k (got {})",
            gemm, cuda::kTmaBoxK, g.k,
            g.gated ? cuda::kTmaWeightBoxRows / 2 : cuda::kTmaWeightBoxRows, g.n, cuda::kTmaBoxRows,
            g.max_rows);
      }
      return {};
    case GroupedGemmKernel::kFfma:
      break;
  }
  return {};
}

GroupedGemmKernel choose_grouped_gemm_kernel(const GroupedGemmProblem& g, const CudaDeviceTraits& d,
                                             std::string* reason) {
  for (const GemmRule& rule : kGroupedGemmRules) {
    if (!rule.applies(g, d)) continue;
    if (reason != nullptr) {
      *reason = rule_reason(rule.id, rule.when, cuda::grouped_gemm_kernel_name(rule.kernel),
                            rule.evidence);
    }
    return rule.kernel;
  }
  MG_FAIL("no grouped GEMM rule applies (the last one always does)");
}

std::string check_cuda_kernel_request(const CudaMoEProblem& p, const CudaDeviceTraits& d,
                                      const CudaKernelRequest& request) {
  // Token-independent: the TMA rows condition is checked per call (choose_cuda_kernels).
  const int64_t rows = std::max<int64_t>(cuda::kTmaBoxRows, p.local_experts);
  const GroupedGemmProblem gemms[2] = {grouped_gemm1(p, 1), grouped_gemm2(p, 1)};
  const std::optional<GroupedGemmKernel> forced[2] = {request.gemm1, request.gemm2};
  for (int i = 0; i < 2; ++i) {
    if (!forced[i]) continue;
    GroupedGemmProblem g = gemms[i];
    g.max_rows = rows;
    const std::string why = grouped_gemm_kernel_check(*forced[i], g, d);
    if (!why.empty()) return fmt::format("{}: GEMM{}: {}", request.str(), i + 1, why);
  }
  return {};
}

CudaKernelChoice choose_cuda_kernels(const CudaMoEProblem& p, int64_t M, const CudaDeviceTraits& d,
                                     const CudaKernelRequest& request, std::string* reason) {
  MG_ASSERT(M > 0, "choose_cuda_kernels for {} tokens", M);
  CudaKernelChoice c;
  if (request.pipeline) {
    c.pipeline = *request.pipeline;
    if (reason != nullptr) *reason = "pipeline forced (" + request.str() + ")";
  } else {
    const int64_t experts = std::max<int64_t>(1, p.local_experts);
    const double rows = static_cast<double>(M) * p.top_k / experts;
    const PipelineInputs in{M, experts, rows,
                            2.0 * rows * (p.gated ? 2 * p.inter : p.inter) * p.hidden};
    for (const PipelineRule& rule : kPipelineRules) {
      if (!rule.applies(in)) continue;
      c.pipeline = rule.pipeline;
      if (reason != nullptr) {
        *reason = "pipeline " + rule_reason(rule.id, rule.when,
                                            cuda_moe_pipeline_name(rule.pipeline), rule.evidence);
      }
      break;
    }
  }
  if (c.pipeline == CudaMoEPipeline::kDecode) {
    MG_CHECK(M <= kDecodeKernelMaxTokens,
             "CUDA MoE kernel '{}': the decode kernels take at most {} tokens, not {}",
             request.str(), kDecodeKernelMaxTokens, M);
  }
  if (c.pipeline != CudaMoEPipeline::kGrouped) return c;
  const GroupedGemmProblem gemms[2] = {grouped_gemm1(p, M), grouped_gemm2(p, M)};
  const std::optional<GroupedGemmKernel> forced[2] = {request.gemm1, request.gemm2};
  GroupedGemmKernel chosen[2] = {};
  for (int i = 0; i < 2; ++i) {
    std::string gemm_why;
    if (forced[i]) {
      const std::string no = grouped_gemm_kernel_check(*forced[i], gemms[i], d);
      MG_CHECK(no.empty(), "CUDA MoE kernel '{}' cannot run {} tokens: GEMM{}: {}", request.str(),
               M, i + 1, no);
      chosen[i] = *forced[i];
      if (reason != nullptr) {
        gemm_why = fmt::format("forced ({})", cuda::grouped_gemm_kernel_name(chosen[i]));
      }
    } else {
      chosen[i] = choose_grouped_gemm_kernel(gemms[i], d, reason != nullptr ? &gemm_why : nullptr);
    }
    if (reason != nullptr) *reason += fmt::format("; GEMM{} {}", i + 1, gemm_why);
  }
  c.gemm1 = chosen[0];
  c.gemm2 = chosen[1];
  return c;
}

}  // namespace mg
