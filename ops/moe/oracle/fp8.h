// The FP8 oracle module: keys, priority lists and weight conversion for FP8 E4M3 experts
// (schemes FP8_BLOCK, FP8_PER_CHANNEL, FP8_PER_TENSOR; proto/model.proto MoEQuantScheme).
//
// Keys: the weight key is the checkpoint's (F8_E4M3, F32 scales per the tensors' group, static);
// the activation key is dynamic F8_E4M3 per token per 128 channels (or per token) where the
// checkpoint quantizes activations and CompileOptions::quantize_activations allows it (W8A8),
// else the compute dtype (W8A16).
// Priority per device:
//   CPU   cpu_fp8 (modular, standard; ops/moe/experts/cpu_fp8_experts.h)
//   CUDA  cuda_fp8 (monolithic, W8A8), cuda_dequant (W8A16 through cuda_moe's kernels;
//         ops/moe/experts/cuda_fp8_experts.h)
// then the device's unquantized backends, which refuse FP8 at their quant check (listed so that
// inspect --plan and a forced request say why).
// Conversion: the canonical shard of this rank, codes kept as they are (never dequantized): the
// rank's experts (EP) and its slice of the intermediate size (TP, which must cut on scale-group
// boundaries), with the matching scale rows / columns.
#pragma once

#include <vector>

#include "framework/device/device.h"
#include "ops/moe/oracle/oracle.h"

namespace mg {

std::vector<const ExpertsBackend*> fp8_priority(Device device);

// The node's keys from its expert weights' quantization (checked by the op's input checks).
MoEQuantConfig fp8_quant_config(const MoEConfig& config, const RawExpertWeights& raw,
                                DType activation_dtype, bool quantize_activations);

QuantizedExpertWeights convert_fp8_weights(const MoEConfig& config, const ParallelConfig& parallel,
                                           const ExpertsShape& shape, const RawExpertWeights& raw);

}  // namespace mg
