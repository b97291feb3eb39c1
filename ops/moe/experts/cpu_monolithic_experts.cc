#include "ops/moe/experts/cpu_monolithic_experts.h"

#include <algorithm>

#include "ops/moe/experts/cpu_checks.h"
#include "ops/moe/experts/cpu_expert_mlp.h"
#include "ops/moe/router/routing.h"

namespace mg {

namespace {

struct Scratch {
  int32_t* ids;     // [M, k]
  float* weights;   // [M, k]
  float* route;     // routing_scratch_floats(M)
  float* x_scaled;  // [M, H] (weight on the input)
  float* h1;        // [M, N1]
  float* act;       // [M, I]
  float* y;         // [M, H]

  Scratch(Workspace& ws, const ExpertsShape& s, const RoutingConfig& r, int64_t M) {
    ids = ws.take<int32_t>(M * s.top_k);
    weights = ws.take<float>(M * s.top_k);
    route = ws.take<float>(routing_scratch_floats(r, M));
    x_scaled = ws.take<float>(s.weight_on_input ? M * s.hidden_size : 0);
    h1 = ws.take<float>(M * s.w13_rows());
    act = ws.take<float>(M * s.intermediate_size);
    y = ws.take<float>(M * s.hidden_size);
  }
};

class CpuMonolithicExperts final : public ExpertsMonolithic {
 public:
  CpuMonolithicExperts(const ExpertsBackend& backend, ExpertsShape shape, RoutingConfig routing,
                       CanonicalExpertWeights weights, Tensor score_correction_bias)
      : ExpertsMonolithic(backend),
        shape_(std::move(shape)),
        routing_(routing),
        weights_(std::move(weights)),
        score_correction_bias_(std::move(score_correction_bias)) {
    check_canonical_weights(weights_, shape_);
    MG_ASSERT(
        !routing_.has_score_correction_bias ||
            (score_correction_bias_.defined() && score_correction_bias_.dtype() == DType::kF32 &&
             score_correction_bias_.numel() == routing_.num_experts),
        "cpu_monolithic needs the score-correction bias [{}] F32", routing_.num_experts);
  }

  size_t workspace_bytes(int64_t max_rows) const override {
    Workspace ws = Workspace::sizing();
    Scratch(ws, shape_, routing_, max_rows);
    return ws.bytes();
  }

  void apply(const DispatchedLogits& t, Workspace& ws, const MoEExecContext& ctx) override {
    const ExpertsShape& s = shape_;
    const int64_t M = t.num_tokens, k = s.top_k, H = s.hidden_size;
    const int64_t N1 = s.w13_rows(), I = s.intermediate_size;
    Scratch sc(ws, s, routing_, M);
    const float* bias =
        routing_.has_score_correction_bias ? score_correction_bias_.data<float>() : nullptr;
    route_rows(routing_, f32_ptr(t.router_logits), M, bias, sc.ids, sc.weights, sc.route, ctx.pool);
    const int32_t* to_local = s.expert_map.global_to_local.data();
    cpu_parallel_for(ctx.pool, M, 1, [&](int64_t begin, int64_t end) {
      for (int64_t tok = begin; tok < end; ++tok) {
        float* out = f32_ptr(t.expert_output) + tok * H;
        std::fill(out, out + H, 0.0f);
        for (int64_t j = 0; j < k; ++j) {
          const int32_t e = to_local[sc.ids[tok * k + j]];
          if (e < 0) continue;
          const float w = sc.weights[tok * k + j];
          const float* x = f32_ptr(t.hidden) + tok * H;
          if (s.weight_on_input) {
            float* xs = sc.x_scaled + tok * H;
            for (int64_t h = 0; h < H; ++h) xs[h] = w * x[h];
            x = xs;
          }
          float* y = sc.y + tok * H;
          run_expert_mlp(s, expert_matrices(weights_, s, e), x, 1, sc.h1 + tok * N1,
                         sc.act + tok * I, y);
          const float scale = s.weight_on_input ? 1.0f : w;
          for (int64_t h = 0; h < H; ++h) out[h] += scale * y[h];
        }
      }
    });
  }

 private:
  ExpertsShape shape_;
  RoutingConfig routing_;
  CanonicalExpertWeights weights_;
  Tensor score_correction_bias_;
};

class CpuMonolithicBackend final : public ExpertsBackend {
 public:
  std::string_view name() const override { return "cpu_monolithic"; }
  bool is_monolithic() const override { return true; }
  ActivationFormat activation_format() const override { return ActivationFormat::kStandard; }
  std::string check_device(Device device) const override { return cpu_check_device(device); }
  std::string check_quant(const MoEQuantConfig& quant) const override {
    return cpu_check_quant(quant);
  }
  std::string check_activation(const ActivationConfig&) const override { return {}; }
  // It routes with the shared routing code, so it implements every method.
  std::string check_routing(const RoutingConfig& routing) const override {
    switch (routing.method) {
      case RoutingMethod::kSoftmaxTopK:
      case RoutingMethod::kSigmoidTopK:
      case RoutingMethod::kTopKSoftmax:
      case RoutingMethod::kGroupedTopK:
      case RoutingMethod::kLlama4Top1Sigmoid:
        return {};
    }
    return "unknown routing method";
  }
  std::string check_parallel(const ParallelConfig&) const override { return {}; }
  std::string check_shape(const ExpertsShape&) const override { return {}; }
  std::unique_ptr<Experts> create(ExpertsBuild build) const override {
    return std::make_unique<CpuMonolithicExperts>(*this, build.shape, build.config.routing(),
                                                  std::move(build.weights),
                                                  std::move(build.score_correction_bias));
  }
};

}  // namespace

const ExpertsBackend& cpu_monolithic_backend() {
  static const CpuMonolithicBackend backend;
  return backend;
}

}  // namespace mg
