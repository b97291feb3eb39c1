// op "embedding": out [T, H] = table [V, H][token_ids[t]] * scale.
#pragma once

#include <cstdint>

namespace mg {

// Throws mg::Error naming the first token id outside [0, vocab) and its row.
void check_token_ids(const int32_t* token_ids, int64_t tokens, int64_t vocab);

// Reference: plain loops. Throws mg::Error like check_token_ids for an id out of range.
void embedding_reference(const int32_t* token_ids, int64_t tokens, const float* table,
                         int64_t vocab, int64_t hidden, float scale, float* out);

}  // namespace mg
