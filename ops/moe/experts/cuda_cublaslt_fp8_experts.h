// cuda_cublaslt_fp8: the FP8 (W8A8) routed experts as per-expert cuBLASLt FP8 GEMMs, the second
// CUDA choice of the FP8 oracle module (ops/moe/oracle/fp8.cc, after cuda_fp8) and its
// cross-check: the same quantized activations (ops/moe/cuda/fp8/fp8_quant_cuda.cuh) through
// NVIDIA's GEMMs instead of ours. Per forward:
//   route -> align -> quantize-gather x -> scales to cuBLASLt's layout -> [read the expert offsets
//   back: one host sync] -> per expert GEMM1 -> bias + activation -> quantize h -> scales ->
//   per expert GEMM2 -> bias -> combine
// Scales: cuBLASLt 12.9+ on sm_90 takes FP32 block scales on both operands. Both run as
// CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F (one float per row per 128-wide K block): the weights'
// 128 x 128 blocks, per-channel and per-tensor scales are all expanded to that at build (a float
// per weight row per K block: 1/128 of the codes' bytes for block scales), and per-token activation
// scales are copied to every K block. So one scale mode pair serves every FP8 layout; cuBLASLt's
// BLK128x128_32F mode (fewer scale reads) and OUTER_VEC_32F (per channel x per token) are not used.
// The sync makes it uncapturable (graph_capturable() false), as cuda_cublas is.
// Refused: K (hidden or intermediate size) not a multiple of 128 (partial 128-element scale blocks
// are not documented for cuBLASLt's block scaling), sizes not multiples of 16 (16-byte rows),
// static activation scales, activations other than F8_E4M3 per 128 channels or per token.
#pragma once

#include "ops/moe/kernel/experts.h"

namespace mg {

const ExpertsBackend& cuda_cublaslt_fp8_backend();

}  // namespace mg
