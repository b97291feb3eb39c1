// The router of one MoE node: gate GEMM (logits = x W_r^T + b_r) and routing (routing.h).
//
//   x       [M, H]  activation dtype (F32 on the CPU)
//   logits  [M, E]  fp32   gate(): fp32 accumulation and output on every device, so that BF16
//                          rounding never flips a close expert selection
//   ids     [M, k]  int32  route(), global expert ids, best first
//   weights [M, k]  fp32   route(), routed_scaling_factor included
// On the CPU everything is F32 and runs on the thread pool; on CUDA the gate is one cuBLASLt
// GEMM and the routing one kernel (router_cuda.h), both queued on the caller's stream.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "framework/core/tensor.h"
#include "ops/moe/config.h"

namespace mg {

class RouterCuda;
class Stream;
class ThreadPool;

// Where a router call runs: the CPU pool, or a CUDA stream with cuBLAS scratch.
struct RouterRun {
  ThreadPool* pool = nullptr;
  Stream* stream = nullptr;
  void* blas_workspace = nullptr;  // gate_workspace_bytes() on CUDA
  size_t blas_workspace_bytes = 0;
};

class Router {
 public:
  // weight [E, H] F32; router_bias [E] F32 iff config.has_router_bias; score_correction_bias
  // [E] F32 iff config.has_score_correction_bias (undefined tensors otherwise). Host tensors.
  Router(RoutingConfig config, int64_t hidden_size, Tensor weight, Tensor router_bias,
         Tensor score_correction_bias);
  // The router on a CUDA device: weight [E, H] in `dtype` on that device (as the plan places
  // it), router_bias and score_correction_bias [E] host F32 (uploaded as F32). Throws mg::Error
  // when the routing does not fit the CUDA kernel.
  static Router on_cuda(RoutingConfig config, int64_t hidden_size, DType dtype,
                        const Tensor& weight, const Tensor& router_bias,
                        const Tensor& score_correction_bias);
  ~Router();
  Router(Router&&) noexcept;
  Router& operator=(Router&&) noexcept;

  const RoutingConfig& config() const { return config_; }
  int64_t hidden_size() const { return hidden_size_; }
  // [E] or null; on the router's device (F32).
  const float* score_correction_bias() const;
  // Element type of the logits: F32 on every device.
  DType logits_dtype() const;
  // cuBLAS scratch one gate() needs (0 on the CPU).
  size_t gate_workspace_bytes() const;

  // logits [M, E] = x [M, H] W_r^T (+ b_r).
  void gate(const void* x, int64_t num_tokens, void* logits, const RouterRun& run) const;
  void gate(const float* x, int64_t num_tokens, float* logits, ThreadPool* pool) const {
    gate(x, num_tokens, logits, RouterRun{pool});
  }
  // Floats of scratch route() needs for `num_tokens` rows (none on CUDA).
  int64_t route_scratch_floats(int64_t num_tokens) const;
  void route(const void* logits, int64_t num_tokens, int32_t* ids, float* weights, float* scratch,
             const RouterRun& run) const;
  void route(const float* logits, int64_t num_tokens, int32_t* ids, float* weights, float* scratch,
             ThreadPool* pool) const {
    route(static_cast<const void*>(logits), num_tokens, ids, weights, scratch, RouterRun{pool});
  }

 private:
  Router(RoutingConfig config, int64_t hidden_size);

  RoutingConfig config_;
  int64_t hidden_size_;
  Tensor weight_;
  Tensor router_bias_;
  Tensor score_correction_bias_;
  std::unique_ptr<RouterCuda> cuda_;  // set by on_cuda()
};

}  // namespace mg
