// The expert MLP on a block of rows of one expert, on the calling thread; shared by the CPU
// expert backends.
//
//   h1 [n, N1] = x [n, H] . w13_e^T (+ b13_e)          GEMM1 (N1 = 2I gated: gate | up)
//   a  [n, I]  = act(h1)                               gated: act(gate) * up
//   y  [n, H]  = a . w2_e^T (+ b2_e)                   GEMM2
#pragma once

#include <cstdint>

#include "framework/core/thread_pool.h"
#include "ops/moe/kernel/expert_weights.h"
#include "ops/moe/kernel/moe_types.h"

namespace mg {

// Pointers to one local expert's canonical weights (biases null when absent).
struct ExpertMatrices {
  const float* w13;  // [N1, H]
  const float* b13;  // [N1] or null
  const float* w2;   // [H, I]
  const float* b2;   // [H] or null
};
ExpertMatrices expert_matrices(const CanonicalExpertWeights& weights, const ExpertsShape& shape,
                               int64_t local_expert);

// a [n, I] = act(h1 [n, N1]).
void apply_expert_activation(const ActivationConfig& act, const float* h1, int64_t n, int64_t I,
                             float* a);

// y [n, H] = Expert(x [n, H]); h1 [n, N1] and a [n, I] are scratch. y may alias x.
void run_expert_mlp(const ExpertsShape& shape, const ExpertMatrices& m, const float* x, int64_t n,
                    float* h1, float* a, float* y);

// fn(begin, end) over [0, n) on `pool`, or inline when it is null.
template <typename Fn>
void cpu_parallel_for(ThreadPool* pool, int64_t n, int64_t grain, Fn&& fn) {
  if (pool) {
    pool->parallel_for(n, fn, grain);
  } else if (n > 0) {
    fn(int64_t{0}, n);
  }
}

// Checks `weights` against `shape` (dtypes, shapes, host memory); throws mg::InternalError.
void check_canonical_weights(const CanonicalExpertWeights& weights, const ExpertsShape& shape);

}  // namespace mg
