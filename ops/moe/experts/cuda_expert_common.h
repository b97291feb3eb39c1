// Pieces shared by the CUDA expert backends (cuda_experts.h): the support checks, the weights on
// the device, and the grouped pipeline align -> gather -> GEMM1+act -> GEMM2 -> combine.
#pragma once

#include <cstdint>
#include <string>

#include "framework/core/tensor.h"
#include "framework/device/device.h"
#include "ops/moe/cuda/moe_align_cuda.h"
#include "ops/moe/cuda/moe_cuda_types.h"
#include "ops/moe/cuda/moe_routing_cuda.h"
#include "ops/moe/heuristics/unquantized_kernel_choice.h"
#include "ops/moe/kernel/expert_weights.h"
#include "ops/moe/kernel/experts.h"

namespace mg {

class Stream;

std::string cuda_check_device(Device device);
std::string cuda_check_quant(const MoEQuantConfig& quant);
// The unquantized backends: TP and EP with dp 1 (the all-gather dispatch's "none" step).
std::string cuda_check_parallel(const ParallelConfig& parallel);
// The FP8 backends: one rank.
std::string cuda_check_single_rank(const ParallelConfig& parallel);
// Grouped GEMM limits for both GEMMs of `shape` plus the alignment's.
std::string cuda_check_grouped_shape(const ExpertsShape& shape);

cuda::MoEActParams cuda_act_params(const ActivationConfig& activation);

// What the kernel choice reads of `device`: compute capability, SM count, and whether the
// loaded binary holds its sm_90a kernels.
CudaDeviceTraits cuda_device_traits(Device device);

// E when `map` is the identity (every expert local under its own id), else 0: the decode kernels
// then take a pair's id as its local expert without reading the map (LocalExperts,
// decode_experts_cuda.cuh).
int identity_expert_count(const ExpertMap& map);

// One rank's expert weights in the activation dtype on the GPU, in the canonical layout
// (w13 [E_local, N1, H], w2 [E_local, H, I], biases [E_local, N1] / [E_local, H]), and the global
// -> local expert map.
struct CudaExpertWeights {
  Tensor w13, w13_bias, w2, w2_bias;
  Tensor expert_map;         // [E] I32
  int identity_experts = 0;  // identity_expert_count(the map)

  CudaExpertWeights(const CanonicalExpertWeights& canonical, const ExpertsShape& shape,
                    Device device);
  const void* b13() const { return w13_bias.defined() ? w13_bias.raw() : nullptr; }
  const void* b2() const { return w2_bias.defined() ? w2_bias.raw() : nullptr; }
  const int32_t* map() const { return expert_map.data<int32_t>(); }
};

// The alignment arrays and the permuted activations of the grouped pipeline, carved from a
// workspace (sizing and real passes walk the same code).
struct GroupedScratch {
  cuda::MoEAlignment align;
  void* x_perm;  // [P, H]
  void* h_perm;  // [P, I]
  void* y_perm;  // [P, H]

  GroupedScratch(Workspace& ws, const ExpertsShape& shape, int64_t num_tokens);
};

// out [M, H] = sum_j w[t, j] Expert_{ids[t, j]}(x[t]) over this rank's experts, with the grouped
// GEMMs `gemm1` and `gemm2` (the kernel choice's). `x` is already scaled for Llama-4 (weights 1)
// by the caller.
void run_grouped_experts(const ExpertsShape& shape, const CudaExpertWeights& weights, const void* x,
                         int64_t num_tokens, const int32_t* topk_ids, const float* topk_weights,
                         const GroupedScratch& scratch, cuda::GroupedGemmKernel gemm1,
                         cuda::GroupedGemmKernel gemm2, void* out, Stream* stream);

// The (token, expert) pairs a monolithic backend runs: the ids and weights the runner routed (its
// fused gate + route launch, ExpertsMonolithic::takes_routing) or, when it did not, routed here
// from `t.router_logits` (F32 on every device, router_cuda.h) into `scratch_ids` /
// `scratch_weights` with the score-correction bias `score_bias` (may be undefined).
struct RoutedPairs {
  const int32_t* ids;
  const float* weights;
};
RoutedPairs routed_pairs(const DispatchedLogits& t, const cuda::RouteParams& route,
                         const Tensor& score_bias, int32_t* scratch_ids, float* scratch_weights,
                         Stream* stream);

}  // namespace mg
