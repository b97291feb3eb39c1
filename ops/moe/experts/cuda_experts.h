// The CUDA expert backends of the unquantized oracle, in priority order (bf16/fp16/fp32
// activations; weights converted once to the activation dtype and uploaded at compile time):
//
//   cuda_moe      monolithic: router logits in. The routing kernel, then the kernels that
//                 ops/moe/heuristics/unquantized_kernel_choice.h chooses for the batch (the one
//                 place that decides; ops/moe/README.md walks a forward): the two decode kernels
//                 (decode_experts_cuda.h: 3 launches in all, no host sync: the decode step a CUDA
//                 graph captures); or align -> gather -> grouped GEMM1 with the activation in its
//                 epilogue -> grouped GEMM2 -> weighted combine (6 launches, no host sync), each
//                 grouped GEMM on the kernel the table picks; or, for large batches of big
//                 experts, the cuda_cublas pipeline (one host sync). `cuda_moe:KERNEL` forces one
//                 (kernel_request_names()).
//   cuda_grouped  modular: the same grouped pipeline from routed ids/weights (5 launches);
//                 `cuda_grouped:grouped_K1+K2` forces its GEMM kernels.
//   cuda_cublas   modular: per-expert cuBLASLt GEMMs. Reads the expert counts back to the host
//                 (one sync per call), so it cannot be captured in a CUDA graph; a second
//                 choice and the cross-check of the grouped GEMM.
// All three take a rank's expert map and intermediate-size shard: TP and EP with dp 1 (the DP
// dispatches run on the CPU only; docs/parallel.md).
#pragma once

#include "ops/moe/kernel/experts.h"

namespace mg {

const ExpertsBackend& cuda_moe_backend();
const ExpertsBackend& cuda_grouped_backend();
const ExpertsBackend& cuda_cublas_backend();

}  // namespace mg
