// op "linear": y [T, out] = (x [T, in] · W [out, in]ᵀ + b [out]) * scale.
// The fast GEMM lives in linear_gemm.h; this header holds the plain reference used by tests, the
// output split of a fused linear (LinearParams.output_features) and its graph rewrite.
#pragma once

#include <cstdint>
#include <vector>

#include "proto/model.pb.h"

namespace mg {

// Reference: loops with fp64 accumulation. `bias` may be null.
void linear_reference(const float* x, int64_t tokens, int64_t in, const float* weight, int64_t out,
                      const float* bias, float scale, float* y);

// Most outputs one linear node may have (LinearParams.output_features); the CUDA GEMV takes
// them in one launch.
inline constexpr int kLinearMaxOutputs = 8;

// The output widths of a linear node whose weight has `out` rows: its output_features, or {out}
// when it has none. Assumes the params were checked (shape inference).
std::vector<int64_t> linear_output_features(const proto::LinearParams& params, int64_t out);

// The graph rewrite (linear_fusion.cc, registered with the fuse-ops pass by register_linear):
// sibling linears that read the same x become one linear with output_features. Returns how many
// fused linears it wrote.
int fuse_sibling_linears(proto::Model& model);

}  // namespace mg
