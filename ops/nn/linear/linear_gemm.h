// The CPU GEMM behind linear, gated_mlp and the CPU MoE experts: Y = X · Wᵀ with W in nn.Linear
// layout [out, in]. Parallel over blocks of output features, so one token (a GEMV, decode) scales
// across threads as well as a prefill batch does.
#pragma once

#include <cstdint>

namespace mg {

class ThreadPool;

// y [tokens, out] (row-major, leading dimension out) = x [tokens, in] · w [out, in]ᵀ.
// All pointers are host fp32, densely packed; y must not alias x or w. `pool` may be null
// (runs on the calling thread). Must not be called from inside a parallel_for of `pool`.
void cpu_gemm_xwt(const float* x, int64_t tokens, int64_t in, const float* w, int64_t out, float* y,
                  ThreadPool* pool);

}  // namespace mg
