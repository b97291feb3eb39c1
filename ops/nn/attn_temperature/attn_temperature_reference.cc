#include <cmath>

#include "ops/nn/attn_temperature/attn_temperature.h"

namespace mg {

void attn_temperature_reference(const float* x, const int32_t* positions, int64_t tokens,
                                int64_t dim, float attn_scale, float floor_scale, float* out) {
  for (int64_t t = 0; t < tokens; ++t) {
    // Written out apart from attn_temperature_factor: floor of the quotient, then log(1 + .).
    const double steps = std::floor((static_cast<double>(positions[t]) + 1.0) / floor_scale);
    const double factor = 1.0 + static_cast<double>(attn_scale) * std::log(1.0 + steps);
    for (int64_t i = 0; i < dim; ++i)
      out[t * dim + i] = static_cast<float>(x[t * dim + i] * factor);
  }
}

}  // namespace mg
