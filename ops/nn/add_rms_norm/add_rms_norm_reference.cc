#include "ops/nn/add/add.h"
#include "ops/nn/add_rms_norm/add_rms_norm.h"
#include "ops/nn/rms_norm/rms_norm.h"

namespace mg {

void add_rms_norm_reference(const float* a, const float* b, float scale, int64_t tokens,
                            int64_t dim, const float* weight, float eps, float* sum, float* y) {
  add_reference(a, b, scale, sum, tokens * dim);
  rms_norm_reference(sum, tokens, dim, dim, weight, eps, y);
}

}  // namespace mg
