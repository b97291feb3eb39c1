#include "ops/moe/router/router_cuda.h"

#include <atomic>
#include <cstdlib>
#include <string_view>

#include "framework/device/allocator.h"
#include "framework/device/convert.h"
#include "framework/device/cuda/cuda_device.h"
#include "framework/device/cuda/dtype_dispatch.h"
#include "ops/moe/cuda/moe_routing_cuda.h"
#include "ops/moe/cuda/router_route_cuda.h"

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

std::atomic<bool>& fused_route_requested() {
  static std::atomic<bool> value{fused_route_requested_by(std::getenv("MG_FUSED_ROUTE"))};
  return value;
}

}  // namespace

bool fused_route_requested_by(const char* value) {
  if (value == nullptr) return false;
  const std::string_view v(value);
  MG_CHECK(v == "0" || v == "1", "MG_FUSED_ROUTE: expected 0 or 1, got '{}'", v);
  return v == "1";
}

bool fused_route_enabled() {
  return fused_route_requested().load(std::memory_order_relaxed);
}

void set_fused_route_enabled(bool enabled) {
  fused_route_requested().store(enabled, std::memory_order_relaxed);
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
            DType::kF32),
      fused_max_rows_(cuda::kRouterRouteMaxRows) {
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

bool CudaRouter::fuses_route(const void* x, int64_t num_tokens, const RouterRun& run) const {
  return run.route_counters != nullptr && num_tokens <= fused_max_rows_ && fused_route_enabled() &&
         cuda::router_route_fits(num_tokens, hidden_size_,
                                 static_cast<int>(dtype_size(weight_.dtype())), x, weight_.raw());
}

void CudaRouter::gate_and_route(const void* x, int64_t num_tokens, void* logits, int32_t* ids,
                                float* weights, float* scratch, const RouterRun& run) const {
  if (num_tokens == 0) return;
  if (!fuses_route(x, num_tokens, run)) {
    gate(x, num_tokens, logits, run);
    route(logits, num_tokens, ids, weights, scratch, run);
    return;
  }
  cuda::RouterRouteArgs a;
  a.x = x;
  a.w = weight_.raw();
  a.router_bias = router_bias_.defined() ? router_bias_.data<float>() : nullptr;
  a.logits = static_cast<float*>(logits);
  a.rows = num_tokens;
  a.in = hidden_size_;
  a.route = params_;
  a.score_bias = score_correction_bias();
  a.ids = ids;
  a.weights = weights;
  a.counter = run.route_counters;
  cuda::dispatch_float_dtype(weight_.dtype(), [&](auto tag) {
    cuda::launch_router_route<decltype(tag)>(a, cuda::native(run.stream));
  });
}

}  // namespace mg
