#include "ops/moe/router/router.h"

#include "framework/core/thread_pool.h"
#include "ops/moe/router/routing.h"
#include "ops/nn/linear/linear_gemm.h"
#ifdef MG_WITH_CUDA
#include "ops/moe/router/router_cuda.h"
#endif

namespace mg {

namespace {

void expect_f32(const Tensor& t, const Shape& shape, std::string_view what) {
  MG_ASSERT(t.defined() && t.dtype() == DType::kF32 && t.shape() == shape && t.device().is_cpu(),
            "router {}: expected host F32{}, got {}", what, shape_str(shape),
            t.defined() ? t.str() : "nothing");
}

}  // namespace

Router::Router(RoutingConfig config, int64_t hidden_size)
    : config_(std::move(config)), hidden_size_(hidden_size) {
  config_.validate();
}

void Router::gate_and_route(const void* x, int64_t num_tokens, void* logits, int32_t* ids,
                            float* weights, float* scratch, const RouterRun& run) const {
  gate(x, num_tokens, logits, run);
  route(logits, num_tokens, ids, weights, scratch, run);
}

CpuRouter::CpuRouter(RoutingConfig config, int64_t hidden_size, Tensor weight, Tensor router_bias,
                     Tensor score_correction_bias)
    : Router(std::move(config), hidden_size),
      weight_(std::move(weight)),
      router_bias_(std::move(router_bias)),
      score_correction_bias_(std::move(score_correction_bias)) {
  const int64_t E = config_.num_experts;
  expect_f32(weight_, {E, hidden_size_}, "weight");
  if (config_.has_router_bias) expect_f32(router_bias_, {E}, "bias");
  if (config_.has_score_correction_bias) {
    expect_f32(score_correction_bias_, {E}, "score-correction bias");
  }
}

const float* CpuRouter::score_correction_bias() const {
  return config_.has_score_correction_bias ? score_correction_bias_.data<float>() : nullptr;
}

void CpuRouter::gate(const void* x_in, int64_t num_tokens, void* logits_out,
                     const RouterRun& run) const {
  const float* x = static_cast<const float*>(x_in);
  float* logits = static_cast<float*>(logits_out);
  const int64_t E = config_.num_experts;
  cpu_gemm_xwt(x, num_tokens, hidden_size_, weight_.data<float>(), E, logits, run.pool);
  if (!config_.has_router_bias) return;
  const float* b = router_bias_.data<float>();
  for (int64_t t = 0; t < num_tokens; ++t) {
    for (int64_t e = 0; e < E; ++e) logits[t * E + e] += b[e];
  }
}

int64_t CpuRouter::route_scratch_floats(int64_t num_tokens) const {
  return routing_scratch_floats(config_, num_tokens);
}

void CpuRouter::route(const void* logits, int64_t num_tokens, int32_t* ids, float* weights,
                      float* scratch, const RouterRun& run) const {
  route_rows(config_, static_cast<const float*>(logits), num_tokens, score_correction_bias(), ids,
             weights, scratch, run.pool);
}

std::unique_ptr<Router> make_router(Device device, const RoutingConfig& config, int64_t hidden_size,
                                    DType dtype, const Tensor& weight, const Tensor& router_bias,
                                    const Tensor& score_correction_bias) {
  switch (device.type) {
    case DeviceType::kCPU:
      return std::make_unique<CpuRouter>(config, hidden_size, weight, router_bias,
                                         score_correction_bias);
    case DeviceType::kCUDA:
#ifdef MG_WITH_CUDA
      return std::make_unique<CudaRouter>(config, hidden_size, dtype, weight, router_bias,
                                          score_correction_bias);
#else
      MG_FAIL("the MoE router on {} needs a build with CUDA (MG_CUDA=ON)", device.str());
#endif
  }
  MG_FAIL("the MoE router has no class for {}", device.str());
}

}  // namespace mg
