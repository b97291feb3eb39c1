// The CPU RMSNorm loop shared by rms_norm and add_rms_norm, so the fused op normalises exactly as
// the op it replaces (same partial sums, same rounding).
#pragma once

#include <cstdint>

#include "framework/core/thread_pool.h"

namespace mg {

// y[u] = x[u] * rsqrt(mean(x[u]²) + eps) * weight over `units` contiguous groups of `group`
// floats; `weight` [group] or null; on `pool` when given.
void rms_norm_cpu(const float* x, int64_t units, int64_t group, const float* weight, float eps,
                  float* y, ThreadPool* pool);

}  // namespace mg
