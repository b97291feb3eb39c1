#include <cmath>

#include "ops/nn/clamp/clamp.h"

namespace mg {

void clamp_reference(const float* x, int64_t n, std::optional<float> min, std::optional<float> max,
                     float* out) {
  for (int64_t i = 0; i < n; ++i) {
    float v = x[i];
    if (!std::isnan(v)) {
      if (min && v < *min) v = *min;
      if (max && v > *max) v = *max;
    }
    out[i] = v;
  }
}

}  // namespace mg
