// The router of one MoE node: gate GEMM (logits = x W_r^T + b_r) and routing (routing.h).
//
//   x       [M, H]  fp32
//   logits  [M, E]  fp32   gate()
//   ids     [M, k]  int32  route(), global expert ids, best first
//   weights [M, k]  fp32   route(), routed_scaling_factor included
#pragma once

#include <cstdint>

#include "framework/core/tensor.h"
#include "ops/moe/config.h"

namespace mg {

class ThreadPool;

class Router {
 public:
  // weight [E, H] F32; router_bias [E] F32 iff config.has_router_bias; score_correction_bias
  // [E] F32 iff config.has_score_correction_bias (undefined tensors otherwise). Host tensors.
  Router(RoutingConfig config, int64_t hidden_size, Tensor weight, Tensor router_bias,
         Tensor score_correction_bias);

  const RoutingConfig& config() const { return config_; }
  int64_t hidden_size() const { return hidden_size_; }
  // [E] or null.
  const float* score_correction_bias() const;

  // logits [M, E] = x [M, H] W_r^T (+ b_r).
  void gate(const float* x, int64_t num_tokens, float* logits, ThreadPool* pool) const;
  // Floats of scratch route() needs for `num_tokens` rows.
  int64_t route_scratch_floats(int64_t num_tokens) const;
  void route(const float* logits, int64_t num_tokens, int32_t* ids, float* weights, float* scratch,
             ThreadPool* pool) const;

 private:
  RoutingConfig config_;
  int64_t hidden_size_;
  Tensor weight_;
  Tensor router_bias_;
  Tensor score_correction_bias_;
};

}  // namespace mg
