// op "gated_mlp": out [T, H] = down · (act(gate · x) ⊙ (up · x)), weights in nn.Linear layout
// gate [I, H], up [I, H], down [H, I]; act one of SILU_GATED, GELU_GATED, GELU_TANH_GATED.
#pragma once

#include <cstdint>

#include "proto/model.pb.h"

namespace mg {

// Throws mg::Error naming `activation` unless it is one gated_mlp supports.
void check_gated_mlp_activation(proto::Activation activation);

// Reference: fp64 loops with its own activation math. x [tokens, hidden], out [tokens, hidden].
void gated_mlp_reference(proto::Activation activation, const float* x, int64_t tokens,
                         int64_t hidden, int64_t intermediate, const float* gate, const float* up,
                         const float* down, float* out);

}  // namespace mg
