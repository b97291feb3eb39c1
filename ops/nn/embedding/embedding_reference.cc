#include "framework/core/error.h"
#include "ops/nn/embedding/embedding.h"

namespace mg {

void embedding_reference(const int32_t* token_ids, int64_t tokens, const float* table,
                         int64_t vocab, int64_t hidden, float scale, float* out) {
  for (int64_t t = 0; t < tokens; ++t) {
    const int64_t id = token_ids[t];
    MG_CHECK(id >= 0 && id < vocab, "embedding reference: token id {} out of range [0, {})", id,
             vocab);
    for (int64_t h = 0; h < hidden; ++h) {
      out[t * hidden + h] = static_cast<float>(static_cast<double>(table[id * hidden + h]) * scale);
    }
  }
}

}  // namespace mg
