// op "add_rms_norm" (params: RmsNormParams with group_size 0): the residual add and the RMSNorm
// that reads it, as one op:  sum = a + b;  y = sum * rsqrt(mean over the row of sum² + eps) * w.
// An add with a scale (Granite's residual_multiplier) is not fused: the op reuses rms_norm's
// params so the graph format needs no new message, and they have no field for it.
// The fuse-ops compile pass (framework/compile/fuse_ops_pass.cc) writes it in place of an add
// whose output an rms_norm over whole rows reads: on a GPU one kernel reads a and b once and
// writes both outputs, instead of two launches and a round trip of the sum through memory.
// Both devices round the sum to the activation dtype before normalising it, as the two ops did.
#pragma once

#include <cstdint>

#include "proto/model.pb.h"

namespace mg {

// The graph rewrite (add_rms_norm_fusion.cc): each scale-free add whose output a whole-row
// rms_norm reads becomes one add_rms_norm node; returns how many.
int fuse_add_rms_norm(proto::Model& model);

// Reference: add_reference then rms_norm_reference (fp64 loops). a, b, sum, y [tokens, dim];
// `weight` [dim] or null.
void add_rms_norm_reference(const float* a, const float* b, float scale, int64_t tokens,
                            int64_t dim, const float* weight, float eps, float* sum, float* y);

}  // namespace mg
