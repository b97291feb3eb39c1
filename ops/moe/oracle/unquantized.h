// The unquantized oracle module: priority lists and weight conversion for F32/F16/BF16 experts.
//
// Priority per device:
//   CPU   cpu_eigen (modular, standard), cpu_batched (modular, batched: the all_to_all
//         dispatch), cpu_monolithic (routing + experts per token; by request)
//   CUDA  cuda_moe (monolithic: chooses its kernels per batch), cuda_grouped, cuda_cublas
//         (ops/moe/experts/cuda_experts.h), all three for 16-byte rows (H and I multiples of
//         8); then cuda_padded, cuda_moe on weights zero-padded once at compile time, for any
//         shape (ops/moe/experts/cuda_padded_experts.h)
// Conversion: every CPU backend reads the canonical layout, so conversion is the canonical
// shard of this rank: F32, w13 [E_local, N1_local, H] with gate rows then up rows (GPT-OSS's
// interleaved rows and the transposed GPT-OSS / Llama-4 layouts are undone here), the rank's
// experts (EP) and its slice of the intermediate size (TP). The w2 bias goes to moe_tp_rank 0
// only.
#pragma once

#include <vector>

#include "framework/device/device.h"
#include "ops/moe/oracle/oracle.h"

namespace mg {

std::vector<const ExpertsBackend*> unquantized_priority(Device device);

CanonicalExpertWeights convert_unquantized_weights(const MoEConfig& config,
                                                   const ParallelConfig& parallel,
                                                   const ExpertsShape& shape,
                                                   const RawExpertWeights& raw);

}  // namespace mg
