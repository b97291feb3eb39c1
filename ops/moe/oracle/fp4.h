// The FP4 oracle module: keys, priority lists and weight conversion for FP4 E2M1 experts, schemes
// MXFP4 (one E8M0 scale per 32 values of a row: GPT-OSS) and NVFP4 (one F8_E4M3 scale per 16
// values and an F32 global scale: ModelOpt, compressed-tensors). One module serves both: they
// share the codes, the per-row groups, the conversion and every backend; only the weight key
// (scale type and group) differs, and the backends check it.
//
// Keys: weight U8 (packed E2M1) with scale U8 (E8M0) per [1, 32] (MXFP4) or F8_E4M3 per [1, 16]
// (NVFP4), static; activations in the compute dtype (weight-only: Hopper has no FP4 tensor cores,
// and the checkpoints' W4A4 activation scales are not used).
// Priority per device:
//   CPU   cpu_fp4 (modular, standard; ops/moe/experts/cpu_fp4_experts.h): dequantizes 128 weight
//         rows at a time inside its GEMMs
//   CUDA  cuda_fp4 (ops/moe/experts/cuda_wna16_experts.h: the WNA16 grouped GEMMs with their
//         E2M1 dequantization policies, codes read packed, scales kept as their E8M0 / E4M3
//         bytes: 4.25 / 4.5 bits a value), cuda_dequant (the weights dequantized
//         once at build to the activation dtype and run by cuda_moe: 4x the weight bytes of FP4
//         in BF16; takes what cuda_fp4 refuses)
// then the device's unquantized backends, which refuse FP4 at their quant check.
// Conversion: the canonical shard of this rank, codes kept packed: the rank's experts (EP), gate
// rows before up rows (GPT-OSS's interleaved rows are undone row by row, scales with them), and
// the slice of the intermediate size (TP: w2's columns must be cut on scale-group boundaries);
// NVFP4's global scales (WeightQuantization::global_scale, [E, 1 or 2]) follow their experts.
#pragma once

#include <vector>

#include "framework/device/device.h"
#include "ops/moe/oracle/oracle.h"

namespace mg {

// kMxfp4 or kNvfp4.
bool is_fp4_scheme(QuantScheme scheme);

std::vector<const ExpertsBackend*> fp4_priority(Device device);

// The node's keys (weight-only: activations in `activation_dtype`).
MoEQuantConfig fp4_quant_config(const MoEConfig& config, const RawExpertWeights& raw,
                                DType activation_dtype);

// What the backends' weight checks see (ExpertWeightFacts): code width 4, the scale groups, and
// whether every scale has a one-byte code (MXFP4: a power of two; NVFP4: an E4M3 value times its
// global). Checkpoints store byte scales; graphs written with F32 / 16-bit scale values may not.
ExpertWeightFacts fp4_weight_facts(const RawExpertWeights& raw, QuantScheme scheme);

QuantizedExpertWeights convert_fp4_weights(const MoEConfig& config, const ParallelConfig& parallel,
                                           const ExpertsShape& shape, const RawExpertWeights& raw);

}  // namespace mg
