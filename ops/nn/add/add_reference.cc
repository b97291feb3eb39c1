#include "ops/nn/add/add.h"

namespace mg {

void add_reference(const float* a, const float* b, float scale, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    out[i] = static_cast<float>(static_cast<double>(a[i]) + static_cast<double>(scale) * b[i]);
  }
}

}  // namespace mg
