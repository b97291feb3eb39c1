// op "rope": rotary position embedding of dims [rotary_offset, rotary_offset + rotary_dim) of
// every head, with NONE / LINEAR / YARN / LLAMA3 frequency scaling (formulas in docs/ops.md).
//
// The kernel's frequency math (rope_freq.cc) and the reference's (rope_reference.cc) are written
// separately on purpose, so the tests cross-check them.
#pragma once

#include <cstdint>
#include <vector>

#include "proto/model.pb.h"

namespace mg {

// Throws mg::Error ("rope: ...") naming the first bad parameter.
void check_rope_params(const proto::RopeParams& params);

// rotary_dim with 0 resolved to head_dim.
int64_t rope_rotary_dim(const proto::RopeParams& params);

// inv_freq_i for i < rotary_dim / 2 after scaling; the angle of pair i at position p is
// p * inv_freq_i. Params must have passed check_rope_params.
std::vector<double> rope_inv_freq(const proto::RopeParams& params);

// Multiplier on cos and sin: YaRN's attention_factor, 1 for the other scalings.
double rope_attention_factor(const proto::RopeParams& params);

// Reference frequency math, independent of the two functions above.
std::vector<double> rope_reference_inv_freq(const proto::RopeParams& params);
double rope_reference_attention_factor(const proto::RopeParams& params);

// Reference: fp64 loops. x, out [tokens, num_heads * head_dim]; positions [tokens].
void rope_reference(const proto::RopeParams& params, const float* x, const int32_t* positions,
                    int64_t tokens, float* out);

}  // namespace mg
