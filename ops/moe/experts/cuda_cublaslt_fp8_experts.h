// cuda_cublaslt_fp8: the FP8 (W8A8) routed experts as per-expert cuBLASLt FP8 GEMMs, the second
// CUDA choice of the FP8 oracle module (ops/moe/oracle/fp8.cc, after cuda_fp8) and its
// cross-check: the same quantized activations (ops/moe/cuda/fp8/fp8_quant_cuda.cuh) through
// NVIDIA's GEMMs instead of ours. Per forward:
//   route -> align -> quantize-gather x -> scales to cuBLASLt's layout -> [read the expert offsets
//   back: one host sync] -> per expert GEMM1 -> bias + activation -> quantize h -> scales ->
//   per expert GEMM2 -> bias -> combine
// The GEMM and its VEC128 scale layout are shared with the FP8 linear
// (ops/nn/linear/fp8_gemm_cublaslt_cuda.h says how every weight layout maps onto it).
// The sync makes it uncapturable (graph_capturable() false), as cuda_cublas is.
// Refused: K (hidden or intermediate size) not a multiple of 128 (partial 128-element scale blocks
// are not documented for cuBLASLt's block scaling), sizes not multiples of 16 (16-byte rows),
// static activation scales, activations other than F8_E4M3 per 128 channels or per token.
#pragma once

#include "ops/moe/kernel/experts.h"

namespace mg {

const ExpertsBackend& cuda_cublaslt_fp8_backend();

}  // namespace mg
