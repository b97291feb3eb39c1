// op "rms_norm": every group of G consecutive elements of a row is normalised,
// y = x * rsqrt(mean(x²) + eps) * w, with w [G] or no weight (Llama-4's L2 qk-norm).
#pragma once

#include <cstdint>

namespace mg {

// Reference: fp64 loops. x, y [tokens, dim]; `weight` [group_size] or null; dim % group_size == 0.
void rms_norm_reference(const float* x, int64_t tokens, int64_t dim, int64_t group_size,
                        const float* weight, float eps, float* y);

}  // namespace mg
