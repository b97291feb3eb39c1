// Activation functions of dense MLPs and MoE experts, fp32, inline so the GEMM epilogues and the
// expert kernels of every backend's CPU path can share one definition.
//
//   silu(x)       = x * sigmoid(x)
//   gelu_erf(x)   = 0.5 x (1 + erf(x / sqrt(2)))                          exact GELU
//   gelu_tanh(x)  = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))       tanh approximation
//   swiglu_oai(g, u, alpha, limit): GPT-OSS's clamped SwiGLU,
//                   g = min(g, limit), u = clamp(u, -limit, limit),
//                   (u + 1) * g * sigmoid(alpha * g)     (HF: alpha 1.702, limit 7)
#pragma once

#include <algorithm>
#include <cmath>

namespace mg {

inline float sigmoid(float x) {
  return 1.0f / (1.0f + std::exp(-x));
}

inline float silu(float x) {
  return x / (1.0f + std::exp(-x));
}

inline float gelu_erf(float x) {
  return 0.5f * x * (1.0f + std::erf(x * 0.70710678118654752f));
}

inline float gelu_tanh(float x) {
  constexpr float kSqrt2OverPi = 0.79788456080286536f;
  return 0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * (x + 0.044715f * x * x * x)));
}

inline float swiglu_oai(float gate, float up, float alpha, float limit) {
  gate = std::min(gate, limit);
  up = std::clamp(up, -limit, limit);
  return (up + 1.0f) * gate * sigmoid(alpha * gate);
}

}  // namespace mg
