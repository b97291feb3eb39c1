#include "ops/nn/linear/linear.h"

namespace mg {

void linear_reference(const float* x, int64_t tokens, int64_t in, const float* weight, int64_t out,
                      const float* bias, float scale, float* y) {
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t o = 0; o < out; ++o) {
      double acc = bias ? static_cast<double>(bias[o]) : 0.0;
      for (int64_t i = 0; i < in; ++i) {
        acc += static_cast<double>(x[t * in + i]) * static_cast<double>(weight[o * in + i]);
      }
      y[t * out + o] = static_cast<float>(acc * static_cast<double>(scale));
    }
  }
}

}  // namespace mg
