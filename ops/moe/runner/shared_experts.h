// Shared experts: one dense MLP every token goes through, next to the routed experts.
//
//   h   [M, N1s] = x [M, H] . [gate; up]^T      (N1s = 2 Is gated, Is otherwise)
//   a   [M, Is]  = act(h)
//   out [M, H]   = a . down^T  [* sigmoid(x . w_sg) per token, when gated by shared_expert_gate]
// With tensor parallelism (tp_size > 1) each TP rank holds a slice of Is and produces a partial
// sum; the runner adds it to the routed output before the TP all-reduce (the sigmoid gate is a
// per-token scalar, so it distributes over the slices).
//
// SharedExperts is the interface the runner calls; make_shared_experts builds the class of the
// device: CpuSharedExperts (here, F32 on the thread pool) or CudaSharedExperts
// (shared_experts_cuda.h: cuBLASLt GEMMs queued on a stream).
//
// FP8 checkpoints (DeepSeek-V3) quantize the shared experts too. Their weights arrive dequantized
// (the place-weights pass does that for inputs that take no codes), which is exactly the codes x
// scales an FP8 GEMM multiplies by; what W8A8 adds is the activation quantization, which the CPU
// class applies to the GEMMs' inputs when `act_quant` is set (per token per 128 channels, per
// token, or static scales). CUDA runs them W8A16 for now.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "framework/core/tensor.h"
#include "framework/device/device.h"
#include "ops/moe/config.h"
#include "ops/moe/kernel/workspace.h"
#include "ops/nn/linear/fp8_gemm_cpu.h"

namespace mg {

class Stream;
class ThreadPool;

class SharedExperts {
 public:
  virtual ~SharedExperts() = default;

  virtual size_t workspace_bytes(int64_t max_tokens) const = 0;
  // out [M, H] = this rank's share of shared(x [M, H]), in the activation dtype (F32 on the
  // CPU), run on `pool` / queued on `stream` (the runner's side stream on a GPU).
  virtual void forward(const void* x, int64_t num_tokens, void* out, Workspace& ws,
                       ThreadPool* pool, Stream* stream) const = 0;
  // y [n] += shared_out [n] (the routed output plus this one), on `stream`.
  virtual void add_output(void* y, const void* shared_out, int64_t n, Stream* stream) const = 0;
};

class CpuSharedExperts final : public SharedExperts {
 public:
  // gate [Is, H] (gated activations only), up [Is, H], down [H, Is], expert_gate [1, H] iff
  // config.has_gate; host F32. Keeps its own copy of this TP rank's slice. Throws mg::Error when
  // Is does not split over tp_size.
  // `act_quant`: quantize both GEMMs' inputs to FP8 as W8A8 checkpoints do; nullopt: keep them.
  CpuSharedExperts(const SharedExpertsConfig& config, int64_t hidden_size, int tp_size, int tp_rank,
                   const Tensor& gate, const Tensor& up, const Tensor& down,
                   const Tensor& expert_gate, std::optional<Fp8MlpActivationQuant> act_quant);

  size_t workspace_bytes(int64_t max_tokens) const override;
  void forward(const void* x, int64_t num_tokens, void* out, Workspace& ws, ThreadPool* pool,
               Stream* stream) const override;
  void add_output(void* y, const void* shared_out, int64_t n, Stream* stream) const override;

 private:
  struct Scratch;

  ActivationConfig activation_;
  int64_t hidden_size_;
  int64_t intermediate_size_;  // this rank's slice
  Tensor w13_;                 // [N1s, H]
  Tensor w2_;                  // [H, Is]
  Tensor expert_gate_;         // [H] or undefined
  std::optional<Fp8MlpActivationQuant> act_quant_;
};

// The shared experts of `device` for TP rank `tp_rank` of `tp_size`: weights as the plan places
// them (CPU: host F32; CUDA: `dtype` on that device, one rank). `act_quant` as for
// CpuSharedExperts (CUDA ignores it: W8A16). Throws mg::Error for what the device's class lacks
// (CUDA: tensor parallelism, an activation) or a device this build lacks.
std::unique_ptr<SharedExperts> make_shared_experts(Device device, const SharedExpertsConfig& config,
                                                   int64_t hidden_size, DType dtype, int tp_size,
                                                   int tp_rank, const Tensor& gate,
                                                   const Tensor& up, const Tensor& down,
                                                   const Tensor& expert_gate,
                                                   std::optional<Fp8MlpActivationQuant> act_quant);

}  // namespace mg
