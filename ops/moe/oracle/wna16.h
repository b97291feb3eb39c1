// The WNA16 oracle module: keys, priority lists and weight conversion for weight-only integer
// experts (schemes INT4_WEIGHT_ONLY, INT8_WEIGHT_ONLY: GPTQ, AWQ, compressed-tensors, make-model
// --quant int4-g128 ...; layout in framework/core/int_quant.h).
//
// Keys: the weight key is the checkpoint's (int4 / uint4 / int8 / uint8 codes, F32 scales per
// [1, g] or per row, zero points where the checkpoint has them, static); the activation key is
// the compute dtype (weight-only: activations are never quantized).
// Priority per device, with the reason for the order:
//   CPU   cpu_wna16 (ops/moe/experts/cpu_wna16_experts.h): dequantizes 128 weight rows at a time
//         inside its GEMMs; the only CPU backend that reads integer codes.
//   CUDA  cuda_wna16 (ops/moe/experts/cuda_wna16_experts.h): the W4A16 / W8A16 grouped GEMMs
//         that stream the packed codes (4x fewer weight bytes than BF16 at 4 bits, which is what
//         decode is bound by). Its weights check (ExpertsBackend::check_weights over
//         wna16_weight_facts) refuses, with the reason, what its kernels cannot read: act-order
//         w13 (a g_idx over the hidden size: the kernels read contiguous scale groups), w2
//         act-order groups of unequal size, groups that are not a multiple of 32 columns, and K
//         (H for w13, the rank's I for w2) not a multiple of the group (a partial last group).
//         Then cuda_dequant (ops/moe/experts/cuda_fp8_experts.h): the codes are dequantized once
//         at build to the activation dtype and run by cuda_moe's kernels - correct everywhere
//         cuda_moe runs (act-order and partial groups included), at BF16's weight bytes.
// then the device's unquantized backends, which refuse integer codes at their quant check (listed
// so that inspect --plan and a forced request say why).
// Conversion (once, at compile time): the canonical shard of this rank: the rank's experts (EP)
// and its slice of the intermediate size (TP, which must cut on w2's scale groups). GPTQ
// act-order on w2 (a g_idx over the intermediate channels) is folded into the weights: the
// intermediate channels of each expert are permuted (w13's gate and up rows, w13's bias, w2's
// columns) so that every w2 group is contiguous and the g_idx disappears - the MLP's output is
// unchanged because the activation is elementwise over those channels. Act-order on w13 (over
// the hidden size, which the experts cannot permute) stays a g_idx that the dequantizing
// backends read.
#pragma once

#include <vector>

#include "framework/device/device.h"
#include "ops/moe/oracle/oracle.h"

namespace mg {

std::vector<const ExpertsBackend*> wna16_priority(Device device);

// What the backends' weights checks see of `raw` (the node's integer expert weights) as
// convert_wna16_weights leaves them: each matrix's code width and scale group, and whether a
// g_idx remains (w13's always; w2's when its groups cannot be made contiguous).
ExpertWeightFacts wna16_weight_facts(const RawExpertWeights& raw);

// The node's keys from its expert weights' quantization (checked by the op's input checks).
MoEQuantConfig wna16_quant_config(const MoEConfig& config, const RawExpertWeights& raw,
                                  DType activation_dtype);

QuantizedExpertWeights convert_wna16_weights(const MoEConfig& config,
                                             const ParallelConfig& parallel,
                                             const ExpertsShape& shape,
                                             const RawExpertWeights& raw);

}  // namespace mg
