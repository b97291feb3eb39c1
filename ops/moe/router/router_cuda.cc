#include "ops/moe/router/router_cuda.h"

#include "framework/device/allocator.h"
#include "framework/device/convert.h"
#include "framework/device/cuda/cuda_device.h"
#include "framework/device/cuda/dtype_dispatch.h"
#include "ops/moe/cuda/moe_routing_cuda.h"

namespace mg {

// The kernel enums mirror ops/moe/config.h value for value.
static_assert(static_cast<int>(cuda::RouteMethod::kGroupedTopK) ==
              static_cast<int>(RoutingMethod::kGroupedTopK));
static_assert(static_cast<int>(cuda::RouteMethod::kLlama4Top1Sigmoid) ==
              static_cast<int>(RoutingMethod::kLlama4Top1Sigmoid));
static_assert(static_cast<int>(cuda::RouteScore::kSigmoid) ==
              static_cast<int>(ScoreFunction::kSigmoid));
static_assert(static_cast<int>(cuda::RouteGroupScore::kSumTop2) ==
              static_cast<int>(GroupScore::kSumTop2));

cuda::RouteParams route_params(const RoutingConfig& c) {
  cuda::RouteParams p;
  p.method = static_cast<cuda::RouteMethod>(c.method);
  p.score_function = static_cast<cuda::RouteScore>(c.score_function);
  p.num_experts = static_cast<int32_t>(c.num_experts);
  p.top_k = static_cast<int32_t>(c.top_k);
  p.num_groups = static_cast<int32_t>(c.num_groups);
  p.groups_kept = static_cast<int32_t>(c.groups_kept);
  p.group_score = static_cast<cuda::RouteGroupScore>(c.group_score);
  p.renormalize = c.renormalize;
  p.has_score_correction_bias = c.has_score_correction_bias;
  p.routed_scaling_factor = c.routed_scaling_factor;
  return p;
}

std::string check_cuda_routing(const RoutingConfig& c) {
  if (c.num_experts > cuda::kMaxRouteExperts) {
    return fmt::format("the CUDA routing kernel handles up to {} experts, not {}",
                       cuda::kMaxRouteExperts, c.num_experts);
  }
  if (c.method == RoutingMethod::kGroupedTopK && c.num_groups > cuda::kMaxRouteGroups) {
    return fmt::format("the CUDA routing kernel handles up to {} expert groups, not {}",
                       cuda::kMaxRouteGroups, c.num_groups);
  }
  if (c.top_k > cuda::kMaxRouteTopK) {
    return fmt::format("the CUDA routing kernel handles top_k up to {}, not {}",
                       cuda::kMaxRouteTopK, c.top_k);
  }
  return {};
}

namespace {

Tensor upload_f32(const Tensor& host, Device device) {
  Tensor out = empty_tensor(device, DType::kF32, host.shape());
  copy_tensor(out, to_f32_cpu(host));
  return out;
}

}  // namespace

CudaRouter::CudaRouter(const RoutingConfig& config, int64_t hidden_size, DType dtype,
                       const Tensor& weight, const Tensor& router_bias,
                       const Tensor& score_correction_bias)
    : Router(config, hidden_size),
      params_(route_params(config)),
      weight_(weight),
      router_bias_(config.has_router_bias ? upload_f32(router_bias, weight.device()) : Tensor()),
      score_correction_bias_(config.has_score_correction_bias
                                 ? upload_f32(score_correction_bias, weight.device())
                                 : Tensor()),
      gemm_(dtype, hidden_size, config.num_experts,
            router_bias_.defined() ? router_bias_.raw() : nullptr, weight.device().index,
            DType::kF32) {
  const std::string why = check_cuda_routing(config);
  MG_CHECK(why.empty(), "MoE router: {}", why);
  MG_ASSERT(weight_.device().is_cuda() && weight_.dtype() == dtype &&
                weight_.shape() == Shape({config.num_experts, hidden_size}),
            "CUDA router weight: expected {}[{}, {}] on a GPU, got {}", dtype_name(dtype),
            config.num_experts, hidden_size, weight_.str());
}

const float* CudaRouter::score_correction_bias() const {
  return score_correction_bias_.defined() ? score_correction_bias_.data<float>() : nullptr;
}

void CudaRouter::gate(const void* x, int64_t num_tokens, void* logits, const RouterRun& run) const {
  if (num_tokens == 0) return;
  gemm_.run(x, num_tokens, weight_.raw(), logits, 1.0f, run.blas_workspace,
            run.blas_workspace_bytes, cuda::native(run.stream));
}

void CudaRouter::route(const void* logits, int64_t num_tokens, int32_t* ids, float* weights, float*,
                       const RouterRun& run) const {
  if (num_tokens == 0) return;
  cuda::launch_moe_route<float>(params_, logits, num_tokens, score_correction_bias(), ids, weights,
                                cuda::native(run.stream));
}

}  // namespace mg
