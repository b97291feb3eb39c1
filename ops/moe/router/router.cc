#include "ops/moe/router/router.h"

#include "framework/core/thread_pool.h"
#include "ops/moe/router/routing.h"
#include "ops/nn/linear/linear_gemm.h"

namespace mg {

namespace {

void expect_f32(const Tensor& t, const Shape& shape, std::string_view what) {
  MG_ASSERT(t.defined() && t.dtype() == DType::kF32 && t.shape() == shape && t.device().is_cpu(),
            "router {}: expected host F32{}, got {}", what, shape_str(shape),
            t.defined() ? t.str() : "nothing");
}

}  // namespace

Router::Router(RoutingConfig config, int64_t hidden_size, Tensor weight, Tensor router_bias,
               Tensor score_correction_bias)
    : config_(config),
      hidden_size_(hidden_size),
      weight_(std::move(weight)),
      router_bias_(std::move(router_bias)),
      score_correction_bias_(std::move(score_correction_bias)) {
  config_.validate();
  const int64_t E = config_.num_experts;
  expect_f32(weight_, {E, hidden_size_}, "weight");
  if (config_.has_router_bias) expect_f32(router_bias_, {E}, "bias");
  if (config_.has_score_correction_bias) {
    expect_f32(score_correction_bias_, {E}, "score-correction bias");
  }
}

const float* Router::score_correction_bias() const {
  return config_.has_score_correction_bias ? score_correction_bias_.data<float>() : nullptr;
}

void Router::gate(const float* x, int64_t num_tokens, float* logits, ThreadPool* pool) const {
  const int64_t E = config_.num_experts;
  cpu_gemm_xwt(x, num_tokens, hidden_size_, weight_.data<float>(), E, logits, pool);
  if (!config_.has_router_bias) return;
  const float* b = router_bias_.data<float>();
  for (int64_t t = 0; t < num_tokens; ++t) {
    for (int64_t e = 0; e < E; ++e) logits[t * E + e] += b[e];
  }
}

int64_t Router::route_scratch_floats(int64_t num_tokens) const {
  return routing_scratch_floats(config_, num_tokens);
}

void Router::route(const float* logits, int64_t num_tokens, int32_t* ids, float* weights,
                   float* scratch, ThreadPool* pool) const {
  route_rows(config_, logits, num_tokens, score_correction_bias(), ids, weights, scratch, pool);
}

}  // namespace mg
