// Plain parameter types shared by the CUDA MoE kernels and their host callers. Host and device
// code include this header, so it holds nothing but PODs (no std::string, no ops/moe/config.h);
// the enum values equal those of ops/moe/config.h (checked where the two meet, in
// ops/moe/experts/cuda_expert_backends.cc).
#pragma once

#include <cstdint>

#include "framework/device/host_device.h"

namespace mg::cuda {

// = MoEActivation. Gated kinds read GEMM1 rows [gate (I) | up (I)].
enum class MoEActKind : int32_t {
  kSiluGated = 0,
  kGeluGated = 1,
  kGeluTanhGated = 2,
  kSwigluOai = 3,
  kReluSquared = 4,
  kSilu = 5,
  kGelu = 6,
};

MG_HOST_DEVICE inline bool is_gated(MoEActKind kind) {
  return kind == MoEActKind::kSiluGated || kind == MoEActKind::kGeluGated ||
         kind == MoEActKind::kGeluTanhGated || kind == MoEActKind::kSwigluOai;
}

struct MoEActParams {
  MoEActKind kind = MoEActKind::kSiluGated;
  float swiglu_alpha = 1.702f;  // kSwigluOai only
  float swiglu_limit = 7.0f;
};

// = RoutingMethod / ScoreFunction / GroupScore.
enum class RouteMethod : int32_t {
  kSoftmaxTopK = 0,
  kSigmoidTopK = 1,
  kTopKSoftmax = 2,
  kGroupedTopK = 3,
  kLlama4Top1Sigmoid = 4,
};
enum class RouteScore : int32_t { kSoftmax = 0, kSigmoid = 1 };
enum class RouteGroupScore : int32_t { kMax = 0, kSumTop2 = 1 };

// RoutingConfig flattened for the routing kernel.
struct RouteParams {
  RouteMethod method = RouteMethod::kSoftmaxTopK;
  RouteScore score_function = RouteScore::kSoftmax;  // kGroupedTopK only
  int32_t num_experts = 0;
  int32_t top_k = 0;
  int32_t num_groups = 1;   // kGroupedTopK only
  int32_t groups_kept = 1;  // kGroupedTopK only
  RouteGroupScore group_score = RouteGroupScore::kMax;
  bool renormalize = false;
  bool has_score_correction_bias = false;
  float routed_scaling_factor = 1.0f;
};

// The most experts and top-k the CUDA routing kernels handle (checked by the oracle).
inline constexpr int32_t kMaxRouteExperts = 1024;
inline constexpr int32_t kMaxRouteTopK = 32;

}  // namespace mg::cuda
