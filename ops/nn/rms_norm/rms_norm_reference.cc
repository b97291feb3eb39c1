#include <cmath>

#include "ops/nn/rms_norm/rms_norm.h"

namespace mg {

void rms_norm_reference(const float* x, int64_t tokens, int64_t dim, int64_t group_size,
                        const float* weight, float eps, float* y) {
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t g0 = 0; g0 < dim; g0 += group_size) {
      const float* xs = x + t * dim + g0;
      double sum_sq = 0.0;
      for (int64_t i = 0; i < group_size; ++i) sum_sq += static_cast<double>(xs[i]) * xs[i];
      const double inv_rms = 1.0 / std::sqrt(sum_sq / static_cast<double>(group_size) + eps);
      for (int64_t i = 0; i < group_size; ++i) {
        const double w = weight ? static_cast<double>(weight[i]) : 1.0;
        y[t * dim + g0 + i] = static_cast<float>(static_cast<double>(xs[i]) * inv_rms * w);
      }
    }
  }
}

}  // namespace mg
