// Which CUDA kernels run the routed experts of an unquantized (BF16 / F16 / F32) MoE layer: the
// one place that decides, for the `cuda_moe` backend (and the tiles of `cuda_grouped`).
//
// A forward on CUDA makes two choices, both here, both from tables in
// unquantized_kernel_choice.cc whose rows name the benchmark that set their thresholds:
//   1. the pipeline, from the shape and the tokens M (kPipelineRules):
//        decode   the two weight-streaming decode kernels (decode_experts_cuda.h), M <= 16;
//        grouped  align -> gather -> grouped GEMM1 + act -> grouped GEMM2 -> combine;
//        cublas   the same with per-expert cuBLASLt GEMMs (one host sync);
//   2. for the grouped pipeline, the kernel of each grouped GEMM (kGroupedGemmRules), from its
//      rows per expert, N, K, whether it is gated, the dtype and the device.
// A request (a kernel name, see parse_cuda_kernel_request) forces either or both; a forced kernel
// that cannot run the problem is an error saying why, never a silent fallback.
//
// Plain C++ (no CUDA): the CPU build compiles and tests the tables. Future schemes (FP8, W4A16,
// MXFP4) add their own unit beside this one.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "framework/core/dtype.h"
#include "ops/moe/cuda/grouped_gemm_kernels.h"
#include "ops/moe/kernel/moe_types.h"

namespace mg {

enum class CudaMoEPipeline { kDecode, kGrouped, kCublas };

std::string_view cuda_moe_pipeline_name(CudaMoEPipeline pipeline);

// The decode kernels take at most this many tokens (= cuda::kDecodeMaxTokens, checked in
// cuda_experts.cc); the auto choice sends them at most kAutoDecodeMaxTokens (row P1 of
// unquantized_kernel_choice.cc has the measurement).
inline constexpr int64_t kDecodeKernelMaxTokens = 16;
inline constexpr int64_t kAutoDecodeMaxTokens = 5;

// What the choice reads of the experts.
struct CudaMoEProblem {
  int64_t local_experts = 0;  // E_local
  int64_t hidden = 0;         // H
  int64_t inter = 0;          // I (this rank's)
  int64_t top_k = 0;
  bool gated = true;  // GEMM1 has 2I rows (gate, up) paired by the activation
  DType dtype = DType::kBF16;

  static CudaMoEProblem of(const ExpertsShape& shape);
};

// What the choice reads of the device.
struct CudaDeviceTraits {
  int sm = 90;         // compute capability, major * 10 + minor
  int sm_count = 132;  // streaming multiprocessors (read by no rule yet)
  // The loaded binary holds the sm_90a kernels (wgmma, TMA): an sm_90 GPU and a 90a build.
  bool sm90a_kernels = true;
};

// One grouped GEMM as the kernel choice sees it.
struct GroupedGemmProblem {
  int64_t n = 0, k = 0;     // output columns, reduction
  int64_t max_rows = 0;     // P = M k (permuted rows)
  int64_t num_experts = 0;  // E_local
  bool gated = false;       // GEMM1 with a gated activation
  DType dtype = DType::kBF16;

  // Average rows per expert, as the rules read it (integer division).
  int64_t rows_per_expert() const { return num_experts > 0 ? max_rows / num_experts : 0; }
};

// A forced choice. Names (kernel_request_names() lists them):
//   auto                       choose everything
//   decode | cublas            that pipeline
//   grouped                    the grouped pipeline, GEMM kernels chosen
//   grouped_K                  the grouped pipeline with kernel K for both GEMMs
//   grouped_K1+K2              K1 for GEMM1, K2 for GEMM2
// with K one of mma16, mma32, mma64, mma128, wgmma, tma, ffma (cuda::GroupedGemmKernel).
struct CudaKernelRequest {
  std::optional<CudaMoEPipeline> pipeline;
  std::optional<cuda::GroupedGemmKernel> gemm1, gemm2;

  bool is_auto() const { return !pipeline && !gemm1 && !gemm2; }
  std::string str() const;  // the name it parses from
};

// Throws mg::Error for an unknown name, listing the known ones.
CudaKernelRequest parse_cuda_kernel_request(std::string_view name);
// auto, decode, cublas, grouped, and grouped_K for every K (the pairs are accepted too).
std::vector<std::string> kernel_request_names();

struct CudaKernelChoice {
  CudaMoEPipeline pipeline = CudaMoEPipeline::kGrouped;
  cuda::GroupedGemmKernel gemm1 = cuda::GroupedGemmKernel::kMma16;  // grouped pipeline only
  cuda::GroupedGemmKernel gemm2 = cuda::GroupedGemmKernel::kMma16;

  std::string name() const;  // "decode", "cublas", "grouped_tma+tma"
};

// "" when kernel `kernel` runs `gemm` on `device`, else why ("tma needs the sm_90a kernels ...").
std::string grouped_gemm_kernel_check(cuda::GroupedGemmKernel kernel,
                                      const GroupedGemmProblem& gemm,
                                      const CudaDeviceTraits& device);

// The table's kernel for one grouped GEMM; `reason` (may be null) gets the row and its evidence.
cuda::GroupedGemmKernel choose_grouped_gemm_kernel(const GroupedGemmProblem& gemm,
                                                   const CudaDeviceTraits& device,
                                                   std::string* reason);

// The two GEMMs of the grouped pipeline for M tokens.
GroupedGemmProblem grouped_gemm1(const CudaMoEProblem& problem, int64_t M);
GroupedGemmProblem grouped_gemm2(const CudaMoEProblem& problem, int64_t M);

// The parts of `request` that do not depend on the tokens: "" when they can run `problem` on
// `device` for some M, else why. Backends run it when they are built (a forced kernel that can
// never run is a build error).
std::string check_cuda_kernel_request(const CudaMoEProblem& problem, const CudaDeviceTraits& device,
                                      const CudaKernelRequest& request);

// The kernels that run M > 0 tokens. Throws mg::Error when a forced part cannot run these M
// tokens (decode above 16 tokens, TMA below 64 rows), saying why. `reason` (may be null: the
// forward's call, which formats nothing) gets why, citing the table rows or "forced", e.g.
// "pipeline P4 (otherwise -> grouped; ...); GEMM1 G3 (...); GEMM2 G3 (...)".
CudaKernelChoice choose_cuda_kernels(const CudaMoEProblem& problem, int64_t M,
                                     const CudaDeviceTraits& device,
                                     const CudaKernelRequest& request,
                                     std::string* reason = nullptr);

}  // namespace mg
