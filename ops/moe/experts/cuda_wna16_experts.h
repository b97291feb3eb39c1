// The CUDA expert backend of the weight-only INT4 / INT8 schemes (W4A16, W8A16: GPTQ, AWQ,
// compressed-tensors pack-quantized):
//
//   cuda_wna16    monolithic: the routing kernel, then align -> WNA16 grouped GEMM1 (the row
//                 gather fused into its loads, the activation into its epilogue) -> WNA16 grouped
//                 GEMM2 (+ b2) -> weighted combine: five launches at any M, no host sync
//                 (graph-capturable). The weights stay packed (4 or 8 bits) on the GPU and are
//                 dequantized in registers (ops/moe/cuda/wna16/wna16_experts_cuda.h says why
//                 mma.sync). At M <= 8 tokens every touched expert is one 16-row tile, so its
//                 packed weights are read once (the decode path). `cuda_wna16:wna16_mma16` or
//                 `:wna16_mma64` forces the GEMM tile.
// One rank; BF16/F16 activations; Llama-4's weight-on-input routing is not taken.
#pragma once

#include <cstdint>
#include <memory>

#include "framework/core/tensor.h"
#include "ops/moe/kernel/experts.h"

namespace mg {

// One quantized matrix W [E_local, N, K] (rows = output channels) in the WNA16 kernels' input
// contract, host tensors: real W = (codes - zeros) * scales per group of `group_size` columns.
struct Wna16MatrixTensors {
  Tensor codes;   // U8 [E, N, K]: 0..15 (4 bits) or 0..255 (8 bits), unpacked
  Tensor scales;  // F32 [E, N, groups]
  Tensor zeros;   // F32 or U8 [E, N, groups], or undefined: symmetric (zero 8 / 128)
  int bits = 4;
  int64_t group_size = 128;  // columns per group; -1: channel-wise
};

const ExpertsBackend& cuda_wna16_backend();

// cuda_wna16 experts from explicit matrices (w13 [E, N1, H] gate rows then up rows, w2 [E, H, I];
// build.quantized's codes and scales are not read, its biases are). What the WNA16 oracle module
// calls once it has its checkpoint's codes, scales and zero points in this form; the backend's
// create() is this with build.quantized read as U8 codes, symmetric, bits from the scheme.
// Repacks once (wna16_pack) and uploads. Throws mg::Error for what the kernels refuse.
std::unique_ptr<Experts> make_cuda_wna16_experts(const ExpertsBuild& build,
                                                 const Wna16MatrixTensors& w13,
                                                 const Wna16MatrixTensors& w2);

// cuda_wna16 experts with random packed weights made on the GPU (the MoE benchmark's and e2e
// benchmark's layers; launch_wna16_random_fill): uniform codes and zero points, scales that keep
// activations O(1). build.quantized's biases are read; nothing else of it.
std::unique_ptr<Experts> make_random_cuda_wna16_experts(const ExpertsBuild& build, int bits,
                                                        int64_t group_size, uint64_t seed);

// Bytes the kernels stream per expert of `shape` (packed codes of w13 and w2 and their F32 group
// pairs): the bench's floor.
double cuda_wna16_expert_bytes(const ExpertsShape& shape, int bits, int64_t group_size);

}  // namespace mg
