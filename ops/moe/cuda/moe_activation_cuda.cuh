// The expert activations of ops/moe/config.h (MoEActivation) as device functions, for the
// epilogues of the CUDA expert kernels. Same fp32 formulas as ops/nn/activation.h and
// ops/moe/experts/cpu_expert_mlp.cc. nvcc only.
#pragma once

#include "ops/moe/cuda/moe_cuda_types.h"
#include "ops/nn/activation_cuda.cuh"

namespace mg::cuda {

__device__ __forceinline__ float moe_sigmoid(float x) {
  return 1.0f / (1.0f + expf(-x));
}

// Gated kinds: act(gate, up). Plain kinds ignore `up`.
__device__ __forceinline__ float moe_activation(const MoEActParams& p, float g, float u) {
  switch (p.kind) {
    case MoEActKind::kSiluGated:
      return silu(g) * u;
    case MoEActKind::kGeluGated:
      return gelu_erf(g) * u;
    case MoEActKind::kGeluTanhGated:
      return gelu_tanh(g) * u;
    case MoEActKind::kSwigluOai: {
      g = fminf(g, p.swiglu_limit);
      u = fminf(fmaxf(u, -p.swiglu_limit), p.swiglu_limit);
      return (u + 1.0f) * g * moe_sigmoid(p.swiglu_alpha * g);
    }
    case MoEActKind::kReluSquared:
      return g > 0.0f ? g * g : 0.0f;
    case MoEActKind::kSilu:
      return silu(g);
    case MoEActKind::kGelu:
      return gelu_erf(g);
  }
  return 0.0f;
}

}  // namespace mg::cuda
