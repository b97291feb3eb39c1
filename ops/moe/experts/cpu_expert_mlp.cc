#include "ops/moe/experts/cpu_expert_mlp.h"

#include <algorithm>
#include <cmath>

#include "ops/nn/activation.h"
#include "ops/nn/linear/linear_gemm.h"

namespace mg {

namespace {

template <typename Fn>
void gated(const float* h1, int64_t n, int64_t I, float* a, Fn fn) {
  for (int64_t r = 0; r < n; ++r) {
    const float* gate = h1 + r * 2 * I;
    const float* up = gate + I;
    float* out = a + r * I;
    for (int64_t i = 0; i < I; ++i) out[i] = fn(gate[i], up[i]);
  }
}

template <typename Fn>
void elementwise(const float* h1, int64_t n, int64_t I, float* a, Fn fn) {
  for (int64_t i = 0; i < n * I; ++i) a[i] = fn(h1[i]);
}

void add_bias(float* y, int64_t n, int64_t width, const float* bias) {
  if (bias == nullptr) return;
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t c = 0; c < width; ++c) y[r * width + c] += bias[c];
  }
}

void expect_tensor(const Tensor& t, const Shape& shape, const char* what) {
  MG_ASSERT(t.defined() && t.dtype() == DType::kF32 && t.shape() == shape && t.device().is_cpu(),
            "CPU experts: {} must be host F32{}, got {}", what, shape_str(shape),
            t.defined() ? t.str() : "nothing");
}

}  // namespace

ExpertMatrices expert_matrices(const CanonicalExpertWeights& w, const ExpertsShape& shape,
                               int64_t e) {
  const int64_t N1 = shape.w13_rows(), H = shape.hidden_size, I = shape.intermediate_size;
  return ExpertMatrices{
      w.w13.data<float>() + e * N1 * H,
      w.w13_bias.defined() ? w.w13_bias.data<float>() + e * N1 : nullptr,
      w.w2.data<float>() + e * H * I,
      w.w2_bias.defined() ? w.w2_bias.data<float>() + e * H : nullptr,
  };
}

void apply_expert_activation(const ActivationConfig& act, const float* h1, int64_t n, int64_t I,
                             float* a) {
  switch (act.kind) {
    case MoEActivation::kSiluGated:
      gated(h1, n, I, a, [](float g, float u) { return silu(g) * u; });
      break;
    case MoEActivation::kGeluGated:
      gated(h1, n, I, a, [](float g, float u) { return gelu_erf(g) * u; });
      break;
    case MoEActivation::kGeluTanhGated:
      gated(h1, n, I, a, [](float g, float u) { return gelu_tanh(g) * u; });
      break;
    case MoEActivation::kSwigluOai: {
      const float alpha = act.swiglu_alpha, limit = act.swiglu_limit;
      gated(h1, n, I, a, [=](float g, float u) { return swiglu_oai(g, u, alpha, limit); });
      break;
    }
    case MoEActivation::kReluSquared:
      elementwise(h1, n, I, a, [](float x) { return x > 0.0f ? x * x : 0.0f; });
      break;
    case MoEActivation::kSilu:
      elementwise(h1, n, I, a, silu);
      break;
    case MoEActivation::kGelu:
      elementwise(h1, n, I, a, gelu_erf);
      break;
  }
}

void run_expert_mlp(const ExpertsShape& shape, const ExpertMatrices& m, const float* x, int64_t n,
                    float* h1, float* a, float* y) {
  if (n == 0) return;
  const int64_t N1 = shape.w13_rows(), H = shape.hidden_size, I = shape.intermediate_size;
  cpu_gemm_xwt(x, n, H, m.w13, N1, h1, nullptr);
  add_bias(h1, n, N1, m.b13);
  apply_expert_activation(shape.activation, h1, n, I, a);
  cpu_gemm_xwt(a, n, I, m.w2, H, y, nullptr);
  add_bias(y, n, H, m.b2);
}

void check_canonical_weights(const CanonicalExpertWeights& w, const ExpertsShape& shape) {
  const int64_t E = shape.num_local_experts(), N1 = shape.w13_rows();
  const int64_t H = shape.hidden_size, I = shape.intermediate_size;
  expect_tensor(w.w13, {E, N1, H}, "w13");
  expect_tensor(w.w2, {E, H, I}, "w2");
  if (w.w13_bias.defined()) expect_tensor(w.w13_bias, {E, N1}, "w13_bias");
  if (w.w2_bias.defined()) expect_tensor(w.w2_bias, {E, H}, "w2_bias");
}

}  // namespace mg
