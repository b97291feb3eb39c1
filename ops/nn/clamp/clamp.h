// op "clamp": out = min(max(x, min), max); an unset bound does not clamp; NaN stays NaN.
#pragma once

#include <cstdint>
#include <optional>

namespace mg {

// Reference: plain loop over n values.
void clamp_reference(const float* x, int64_t n, std::optional<float> min, std::optional<float> max,
                     float* out);

}  // namespace mg
