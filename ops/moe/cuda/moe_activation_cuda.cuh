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

// GPT-OSS's clamped SwiGLU: (clamp(u) + 1) · g · sigmoid(alpha · g), g clamped above.
__device__ __forceinline__ float moe_swiglu_oai(const MoEActParams& p, float g, float u) {
  g = fminf(g, p.swiglu_limit);
  u = fminf(fmaxf(u, -p.swiglu_limit), p.swiglu_limit);
  return (u + 1.0f) * g * moe_sigmoid(p.swiglu_alpha * g);
}

// Every kind, as a call. moe_activation below inlines only the kinds the families use in their hot
// paths: an epilogue calls it for each of a tile's values, and with every kind's code inlined at
// each call the FP8 GEMM2 grew to 360 KB of SASS and stalled 41% of its cycles on instruction
// fetch (Nsight Compute, H200, session 17, docs/performance.md).
static __device__ __noinline__ float moe_activation_call(const MoEActParams p, float g, float u) {
  switch (p.kind) {
    case MoEActKind::kSiluGated:
      return silu(g) * u;
    case MoEActKind::kGeluGated:
      return gelu_erf(g) * u;
    case MoEActKind::kGeluTanhGated:
      return gelu_tanh(g) * u;
    case MoEActKind::kSwigluOai:
      return moe_swiglu_oai(p, g, u);
    case MoEActKind::kReluSquared:
      return g > 0.0f ? g * g : 0.0f;
    case MoEActKind::kSilu:
      return silu(g);
    case MoEActKind::kGelu:
      return gelu_erf(g);
  }
  return 0.0f;
}

// Gated kinds: act(gate, up). Plain kinds ignore `up`. SiLU-gated (Mixtral, Qwen, DeepSeek, OLMoE,
// Llama-4, Granite) and SwiGLU-OAI (GPT-OSS) inline, the others (GELU gated, ReLU², plain SiLU /
// GELU) a call to moe_activation_call.
__device__ __forceinline__ float moe_activation(const MoEActParams& p, float g, float u) {
  if (p.kind == MoEActKind::kSiluGated) return silu(g) * u;
  if (p.kind == MoEActKind::kSwigluOai) return moe_swiglu_oai(p, g, u);
  return moe_activation_call(p, g, u);
}

}  // namespace mg::cuda
