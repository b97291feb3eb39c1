// Backend "cpu_wna16": modular CPU experts for weight-only integer codes (schemes
// INT4_WEIGHT_ONLY, INT8_WEIGHT_ONLY; canonical layout in framework/core/int_quant.h), standard
// format. The permutation stages are cpu_eigen's (cpu_eigen_experts.h); the expert MLP reads the
// codes and dequantizes one tile of 128 weight rows at a time into F32 inside its GEMM loop
// (ops/nn/linear/int_gemm_cpu.h; never a whole expert or the model at once). Activations stay
// F32 (weight-only).
#pragma once

#include "ops/moe/kernel/experts.h"

namespace mg {

const ExpertsBackend& cpu_wna16_backend();

}  // namespace mg
