#include "ops/nn/concat_heads/concat_heads.h"

namespace mg {

void concat_heads_reference(const float* a, const float* b, int64_t tokens, int64_t heads,
                            int64_t a_dim, int64_t b_heads, int64_t b_dim, float* out) {
  const int64_t out_dim = a_dim + b_dim;
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t h = 0; h < heads; ++h) {
      float* o = out + (t * heads + h) * out_dim;
      for (int64_t i = 0; i < a_dim; ++i) o[i] = a[(t * heads + h) * a_dim + i];
      const int64_t hb = b_heads == 1 ? 0 : h;
      for (int64_t i = 0; i < b_dim; ++i) o[a_dim + i] = b[(t * b_heads + hb) * b_dim + i];
    }
  }
}

}  // namespace mg
