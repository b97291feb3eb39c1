// Backend "cpu_fp8": modular CPU experts for FP8 E4M3 weights (schemes FP8_BLOCK,
// FP8_PER_CHANNEL, FP8_PER_TENSOR), standard format. The permutation stages are cpu_eigen's
// (cpu_eigen_experts.h); the expert MLP reads the codes and dequantizes one tile of 128 weight rows
// at a time into F32 inside its GEMM loop (never a whole expert or the model at once).
//
// W8A8 (dynamic activation key): GEMM1's input rows and GEMM2's input (the activation output) are
// quantized per token per group exactly as quantize_fp8_e4m3_group (framework/core/fp8.h) and
// used as codes x scale, as DeepSeek-V3's act_quant + FP8 GEMM compute; W8A16 uses them as they
// are.
#pragma once

#include "ops/moe/kernel/experts.h"

namespace mg {

const ExpertsBackend& cpu_fp8_backend();

}  // namespace mg
