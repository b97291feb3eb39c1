// The shared experts on CUDA (shared_experts.h's SharedExperts; make_shared_experts builds it),
// one rank of `tp_size` (tensor parallelism: rows [r*Is/tp, (r+1)*Is/tp) of gate and up and those
// columns of down, copied at construction; the output is this rank's partial sum):
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
#include "ops/moe/runner/shared_experts.h"
#include "ops/nn/linear/linear_gemm_cuda.h"

namespace mg {

class Stream;

class CudaSharedExperts final : public SharedExperts {
 public:
  // gate [Is, H] (gated activations), up [Is, H], down [H, Is], expert_gate [1, H] iff
  // config.has_gate: `dtype` tensors on one CUDA device, unsplit (Is whole). Throws mg::Error
  // when Is is not a multiple of tp_size.
  CudaSharedExperts(const SharedExpertsConfig& config, int64_t hidden_size, DType dtype,
                    int tp_size, int tp_rank, const Tensor& gate, const Tensor& up,
                    const Tensor& down, const Tensor& expert_gate);

  size_t workspace_bytes(int64_t max_tokens) const override;
  void forward(const void* x, int64_t num_tokens, void* out, Workspace& ws, ThreadPool* pool,
               Stream* stream) const override;
  void add_output(void* y, const void* shared_out, int64_t n, Stream* stream) const override;

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
