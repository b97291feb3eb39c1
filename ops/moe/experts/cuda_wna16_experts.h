// The CUDA expert backend of the weight-only INT4 / INT8 schemes (W4A16, W8A16: GPTQ, AWQ,
// compressed-tensors pack-quantized):
//
//   cuda_wna16    monolithic: the routing kernel, then align -> WNA16 grouped GEMM1 (the row
//                 gather fused into its loads, the activation into its epilogue) -> WNA16 grouped
//                 GEMM2 (+ b2) -> weighted combine: five launches above 8 tokens, no host sync
//                 (graph-capturable). The weights stay packed (4 or 8 bits) on the GPU and are
//                 dequantized in registers (ops/moe/cuda/wna16/wna16_experts_cuda.h says why
//                 mma.sync). At M = 1 token (2 for integer codes with integer zero points:
//                 wna16_decode_threshold) the decode path instead:
//                 route -> up (GEMM1 + act per (token, expert) pair) -> down (GEMM2 + the
//                 weighted top-k sum into the output), three launches over the same packed
//                 weights (ops/moe/cuda/wna16/wna16_decode_cuda.h). From
//                 kWna16DequantMinRowsPerExpert rows an expert the large-M path: align -> gather ->
//                 per chunk of experts, their packed weights dequantized into a bounded BF16/F16
//                 workspace and cuda_moe's grouped GEMMs run over them -> combine
//                 (wna16_experts_cuda.h, section 4). `cuda_wna16:wna16_decode` forces the decode
//                 path up to 16 tokens,
//                 `:wna16_dequant` the large-M path at any M; `:wna16_mma16`, `:wna16_mma32` or
//                 `:wna16_mma64` forces the GEMM tile (never the decode or the large-M path).
//   cuda_fp4      the same backend and kernels for FP4 E2M1 weights (MXFP4: GPT-OSS; NVFP4; the
//                 FP4 oracle module, ops/moe/oracle/fp4.h, lists it first on CUDA): the codes stay
//                 packed 4-bit (repacked once at build into the kernels' layout by
//                 wna16_pack_e2m1, or on the GPU for codes made there) and are decoded in
//                 registers by the kernels' E2M1 policies; the scales stay bytes: MXFP4's E8M0 per
//                 32 columns (shifted into an F32 exponent), NVFP4's E4M3 per 16 with the
//                 expert's F32 global scale applied once per output (4.25 / 4.5 bits a value).
//                 Biases on both GEMMs and every activation (SwiGLU-OAI's clamp and alpha
//                 included) as cuda_wna16.
// One rank; BF16/F16 activations; Llama-4's weight-on-input routing is not taken.
#pragma once

#include <cstdint>
#include <memory>

#include "framework/core/tensor.h"
#include "ops/moe/cuda/wna16/wna16_experts_cuda.h"
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
  // kFromDtype: `codes` as above. An integer element: `codes` are that element's canonical packed
  // codes (framework/core/int_quant.h) already on the GPU, repacked there (wna16_pack_on_device).
  QuantElement canonical = QuantElement::kFromDtype;
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

// One matrix in the kernels' packed layout on a device: `layout` (its data vectors empty) says
// what the words and params hold.
struct Wna16DeviceMatrix {
  Tensor words;   // I32 [E, layout.word_count() / E]
  Tensor params;  // F32 [E, layout.param_count() / E]: {s, -z·s} per row and group
  cuda::Wna16PackedHost layout;
};

// A layer's packed weights, w13 [E, w13_rows, H] (gated: gate rows, then up rows) and w2
// [E, H, I].
struct Wna16DeviceWeights {
  Wna16DeviceMatrix w13, w2;
};

// The random packed weights make_random_cuda_wna16_experts builds its experts on, for `shape` on
// `device` (a GPU), kept by the caller: `bench moe --quant int4-g128 ...` times experts built on
// them and reads the experts its check needs back (wna16_unpack_host). Throws mg::Error for
// groups the kernels do not take (wna16_pack_check).
Wna16DeviceWeights make_random_wna16_weights(const ExpertsShape& shape, Device device, int bits,
                                             int64_t group_size, uint64_t seed);

// cuda_wna16 experts on `weights` (adopted, not copied); build.quantized's biases are read,
// nothing else of it.
std::unique_ptr<Experts> make_cuda_wna16_experts_from_packed(const ExpertsBuild& build,
                                                             const Wna16DeviceWeights& weights);

const ExpertsBackend& cuda_fp4_backend();

// cuda_fp4 experts from the FP4 oracle's converted weights: build.quantized's w13 / w2 are U8
// packed E2M1 codes [E, N, K / 2] with effective F32 scales [E, N, ceil(K / G)] (G a multiple of
// 32 for MXFP4, 16 for NVFP4; NVFP4's global scale folded in, and kept in
// WeightQuantization::global_scale) and optional F32 biases. Repacks once (wna16_pack_e2m1, or on
// the GPU for codes there) with the scales encoded back into their bytes, and uploads. Throws
// mg::Error for a scale with no byte (MXFP4: not a power of two; NVFP4: not E4M3 x global).
std::unique_ptr<Experts> make_cuda_fp4_experts(const ExpertsBuild& build);

// Bytes the cuda_fp4 kernels stream per expert of `shape` under FP4 `scheme`: packed codes, one
// scale byte per 32 (MXFP4) or 16 (NVFP4) columns of a row, and NVFP4's F32 global per part.
double cuda_fp4_expert_bytes(const ExpertsShape& shape, QuantScheme scheme);

// Bytes the kernels stream per expert of `shape` (packed codes of w13 and w2 and their F32 group
// pairs): the bench's floor.
double cuda_wna16_expert_bytes(const ExpertsShape& shape, int bits, int64_t group_size);

}  // namespace mg
