#include <cmath>
#include <vector>

#include "framework/core/error.h"
#include "ops/nn/gated_mlp/gated_mlp.h"

namespace mg {

namespace {

double reference_act(proto::Activation activation, double g) {
  constexpr double kPi = 3.14159265358979323846;
  if (activation == proto::SILU_GATED) return g / (1.0 + std::exp(-g));
  if (activation == proto::GELU_GATED) return 0.5 * g * (1.0 + std::erf(g / std::sqrt(2.0)));
  if (activation == proto::GELU_TANH_GATED) {
    return 0.5 * g * (1.0 + std::tanh(std::sqrt(2.0 / kPi) * (g + 0.044715 * g * g * g)));
  }
  MG_FAIL("gated_mlp reference: unsupported activation {}", static_cast<int>(activation));
}

}  // namespace

void gated_mlp_reference(proto::Activation activation, const float* x, int64_t tokens,
                         int64_t hidden, int64_t intermediate, const float* gate, const float* up,
                         const float* down, float* out) {
  std::vector<double> h(static_cast<size_t>(intermediate));
  for (int64_t t = 0; t < tokens; ++t) {
    const float* xt = x + t * hidden;
    for (int64_t i = 0; i < intermediate; ++i) {
      double g = 0.0, u = 0.0;
      for (int64_t k = 0; k < hidden; ++k) {
        g += static_cast<double>(gate[i * hidden + k]) * xt[k];
        u += static_cast<double>(up[i * hidden + k]) * xt[k];
      }
      h[i] = reference_act(activation, g) * u;
    }
    for (int64_t o = 0; o < hidden; ++o) {
      double acc = 0.0;
      for (int64_t i = 0; i < intermediate; ++i) {
        acc += static_cast<double>(down[o * intermediate + i]) * h[i];
      }
      out[t * hidden + o] = static_cast<float>(acc);
    }
  }
}

}  // namespace mg
