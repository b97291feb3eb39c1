// The CUDA expert backends of the FP8 oracle module (ops/moe/oracle/fp8.h), in priority order:
//
//   cuda_fp8      monolithic, W8A8: the routing kernel, then the kernels that
//                 ops/moe/heuristics/fp8_kernel_choice.h chooses for the batch (the one place
//                 that decides): the FP8 decode kernels (M <= 8: weights read once per touched
//                 expert), or align -> quantize-gather -> FP8 grouped GEMM1 + act -> quantize h ->
//                 FP8 grouped GEMM2 -> combine (ops/moe/cuda/fp8/fp8_experts_cuda.h). Codes and
//                 scales stay as the checkpoint has them (uploaded once); activations are
//                 quantized per call exactly as framework/core/fp8.h defines. No host sync:
//                 graph-capturable. `cuda_fp8:NAME` forces a kernel.
//   cuda_dequant  weight-only: FP8 weights with activation quantization off (W8A16), the FP4
//                 schemes (MXFP4, NVFP4; ops/moe/oracle/fp4.h) and the weight-only INT4 / INT8
//                 codes (ops/moe/oracle/wna16.h): the weights are dequantized once at build to
//                 the activation dtype (dequantize_cpu reads every code format) and run by
//                 cuda_moe's kernels (the CPU's weight-only numbers, on the GPU; two to four
//                 times the quantized weight bytes).
// Both run one rank; Llama-4's weight-on-input routing is not taken by cuda_fp8.
#pragma once

#include "ops/moe/kernel/experts.h"

namespace mg {

const ExpertsBackend& cuda_fp8_backend();
const ExpertsBackend& cuda_dequant_backend();

}  // namespace mg
