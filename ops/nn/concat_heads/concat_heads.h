// op "concat_heads": per-head concatenation of a [T, n * da] and b [T, m * db], m = 1 or n.
#pragma once

#include <cstdint>

namespace mg {

// Reference: plain loops. a [tokens, heads * a_dim]; b [tokens, b_heads * b_dim] with b_heads 1
// (shared by every head) or heads; out [tokens, heads * (a_dim + b_dim)].
void concat_heads_reference(const float* a, const float* b, int64_t tokens, int64_t heads,
                            int64_t a_dim, int64_t b_heads, int64_t b_dim, float* out);

}  // namespace mg
