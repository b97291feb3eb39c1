// op "linear": y [T, out] = (x [T, in] · W [out, in]ᵀ + b [out]) * scale.
// The fast GEMM lives in linear_gemm.h; this header holds the plain reference used by tests.
#pragma once

#include <cstdint>

namespace mg {

// Reference: loops with fp64 accumulation. `bias` may be null.
void linear_reference(const float* x, int64_t tokens, int64_t in, const float* weight, int64_t out,
                      const float* bias, float scale, float* y);

}  // namespace mg
