// Backend "cpu_fp4": modular CPU experts for FP4 E2M1 weights (schemes MXFP4 and NVFP4; the oracle
// module is ops/moe/oracle/fp4.h), weight-only. The permutation stages are cpu_eigen's
// (cpu_eigen_experts.h); the expert MLP reads the packed codes and dequantizes one tile of 128
// weight rows at a time into F32 (code x effective group scale) inside its GEMM loop, never a
// whole expert or the model at once. Biases and every activation (GPT-OSS's SwiGLU-OAI with its
// clamp and alpha included) are applied exactly as cpu_eigen applies them to F32 weights, so on
// the same dequantized values the two give the same numbers.
#pragma once

#include "ops/moe/kernel/experts.h"

namespace mg {

const ExpertsBackend& cpu_fp4_backend();

}  // namespace mg
