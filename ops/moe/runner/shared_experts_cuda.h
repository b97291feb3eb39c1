// The CUDA half of SharedExperts (shared_experts.h), one rank:
//   h   [M, N1s] = x . [gate; up]^T      one cuBLASLt GEMM over the concatenated weights
//   a   [M, Is]  = act(h)                 launch_moe_activation
//   out [M, H]   = a . down^T             cuBLASLt
//   out *= sigmoid(x . w_sg)              Qwen2-MoE's gate: a [M, 1] GEMM + one scaling pass
// Everything is queued on the caller's stream (the runner's side stream), scratch and cuBLAS
// workspace come from the runner's workspace. Built only with MG_WITH_CUDA.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "framework/core/tensor.h"
#include "ops/moe/config.h"
#include "ops/moe/kernel/workspace.h"
#include "ops/nn/linear/linear_gemm_cuda.h"

namespace mg {

class Stream;

class SharedExpertsCuda {
 public:
  // gate [Is, H] (gated activations), up [Is, H], down [H, Is], expert_gate [1, H] iff
  // config.has_gate: `dtype` tensors on one CUDA device.
  SharedExpertsCuda(const SharedExpertsConfig& config, int64_t hidden_size, DType dtype,
                    const Tensor& gate, const Tensor& up, const Tensor& down,
                    const Tensor& expert_gate);

  size_t workspace_bytes(int64_t max_tokens) const;
  void forward(const void* x, int64_t num_tokens, void* out, Workspace& ws, Stream* stream) const;

 private:
  struct Scratch;

  SharedExpertsConfig config_;
  int64_t hidden_size_;
  DType dtype_;
  Tensor w13_;  // [N1s, H]
  Tensor w2_;   // [H, Is]
  Tensor expert_gate_;
  cuda::GemmXwt gemm13_;
  cuda::GemmXwt gemm2_;
  std::optional<cuda::GemmXwt> gemm_gate_;
};

}  // namespace mg
