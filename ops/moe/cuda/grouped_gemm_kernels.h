// The kernels behind launch_grouped_gemm (grouped_gemm_cuda.h), named so that the host can choose
// one (ops/moe/heuristics/unquantized_kernel_choice.h) and the launcher runs exactly that one.
// Plain C++ (no CUDA headers): the CPU build compiles the heuristics and their test.
#pragma once

#include <cstdint>
#include <string_view>

namespace mg::cuda {

enum class GroupedGemmKernel : int32_t {
  kMma16,   // mma.sync, 16-row decode tiles (gated 16 × 32, plain 16 × 64), 8 stages
  kMma32,   // mma.sync, 32 × 128 plain tiles (no gated tile of this size)
  kMma64,   // mma.sync, 64 × 64 gated tiles (no plain tile of this size)
  kMma128,  // mma.sync, 128 × 256 plain tiles (no gated tile of this size)
  kWgmma,   // cp.async-fed wgmma, 128 rows × 256 weight rows; sm_90a only
  kTma,     // persistent TMA + wgmma, 128 rows × 256 weight rows; sm_90a only
  kFfma,    // fp32 FFMA tiles; F32 only (the exact reference mode)
};

inline constexpr GroupedGemmKernel kAllGroupedGemmKernels[] = {
    GroupedGemmKernel::kMma16,  GroupedGemmKernel::kMma32, GroupedGemmKernel::kMma64,
    GroupedGemmKernel::kMma128, GroupedGemmKernel::kWgmma, GroupedGemmKernel::kTma,
    GroupedGemmKernel::kFfma};

constexpr std::string_view grouped_gemm_kernel_name(GroupedGemmKernel kernel) {
  switch (kernel) {
    case GroupedGemmKernel::kMma16:
      return "mma16";
    case GroupedGemmKernel::kMma32:
      return "mma32";
    case GroupedGemmKernel::kMma64:
      return "mma64";
    case GroupedGemmKernel::kMma128:
      return "mma128";
    case GroupedGemmKernel::kWgmma:
      return "wgmma";
    case GroupedGemmKernel::kTma:
      return "tma";
    case GroupedGemmKernel::kFfma:
      return "ffma";
  }
  return "?";
}

// The TMA kernel's boxes (grouped_gemm_tma.cuh checks its TmaTile against these): the driver
// rejects a box larger than the tensor, so K >= 64, at least 64 rows (max_rows) and N >= the
// weight box's rows (256 plain; gated boxes are 128 gate + 128 up rows).
inline constexpr int64_t kTmaBoxK = 64, kTmaBoxRows = 64, kTmaWeightBoxRows = 256;

}  // namespace mg::cuda
