// Shared experts: one dense MLP every token goes through, next to the routed experts.
//
//   h   [M, N1s] = x [M, H] . [gate; up]^T      (N1s = 2 Is gated, Is otherwise)
//   a   [M, Is]  = act(h)
//   out [M, H]   = a . down^T  [* sigmoid(x . w_sg) per token, when gated by shared_expert_gate]
// With tensor parallelism (tp_size > 1) each TP rank holds a slice of Is and produces a partial
// sum; the runner adds it to the routed output before the TP all-reduce (the sigmoid gate is a
// per-token scalar, so it distributes over the slices).
#pragma once

#include <cstdint>
#include <memory>

#include "framework/core/tensor.h"
#include "ops/moe/config.h"
#include "ops/moe/kernel/workspace.h"

namespace mg {

class SharedExpertsCuda;
class Stream;
class ThreadPool;

class SharedExperts {
 public:
  // gate [Is, H] (gated activations only), up [Is, H], down [H, Is], expert_gate [1, H] iff
  // config.has_gate; host F32. Keeps its own copy of this TP rank's slice. Throws mg::Error when
  // Is does not split over tp_size.
  SharedExperts(const SharedExpertsConfig& config, int64_t hidden_size, int tp_size, int tp_rank,
                const Tensor& gate, const Tensor& up, const Tensor& down,
                const Tensor& expert_gate);
  // On a CUDA device, one rank (no TP slicing): the same weights in `dtype` on that device, as
  // the plan places them. Throws mg::Error for an activation the CUDA path lacks.
  static SharedExperts on_cuda(const SharedExpertsConfig& config, int64_t hidden_size, DType dtype,
                               const Tensor& gate, const Tensor& up, const Tensor& down,
                               const Tensor& expert_gate);
  ~SharedExperts();
  SharedExperts(SharedExperts&&) noexcept;
  SharedExperts& operator=(SharedExperts&&) noexcept;

  size_t workspace_bytes(int64_t max_tokens) const;
  // out [M, H] = this rank's share of shared(x [M, H]), in the activation dtype (F32 on the
  // CPU). On CUDA it is queued on `stream` (the runner's side stream).
  void forward(const void* x, int64_t num_tokens, void* out, Workspace& ws, ThreadPool* pool,
               Stream* stream) const;

 private:
  struct Scratch;
  SharedExperts() = default;

  ActivationConfig activation_;
  int64_t hidden_size_;
  int64_t intermediate_size_;                // this rank's slice
  Tensor w13_;                               // [N1s, H]
  Tensor w2_;                                // [H, Is]
  Tensor expert_gate_;                       // [H] or undefined
  std::unique_ptr<SharedExpertsCuda> cuda_;  // set by on_cuda()
};

}  // namespace mg
