// The CPU attention kernel on raw pointers (testable alone, reusable by other attention ops).
#pragma once

#include <cstdint>

#include "framework/op/kv_batch.h"

namespace mg {

class ThreadPool;

struct AttentionDims {
  int64_t heads = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;
  int64_t v_head_dim = 0;
  float scale = 1.0f;
  int64_t sliding_window = 0;  // 0: off
  int64_t chunk_size = 0;      // 0: off
};

// q [tokens, H * D] at `positions` [tokens]; the keys and values of every visible position are
// already in k_cache [*, KV, D] and v_cache [*, KV, Dv]: row = position, or with `kv` (may be
// null) the row its sequence's block table gives (kv_batch.h; the rows of one sequence must be
// consecutive); sinks [H] or null; out [tokens, H * Dv]. `pool` may be null.
//
// Work is split into tiles of up to 16 query rows (a few tokens × the heads of one KV group)
// of one sequence that stream the same keys: each key block is loaded once per tile instead of
// once per head.
// Softmax is single-pass ("online") with the running row max subtracted, accumulated directly
// in the output rows, so the kernel needs no scratch memory.
void attention_cpu(const AttentionDims& dims, const float* q, const int32_t* positions,
                   int64_t tokens, const float* k_cache, const float* v_cache, const float* sinks,
                   float* out, ThreadPool* pool, const KvBatch* kv = nullptr);

// The cache row of position j of sequence `slot` (kv may be null: row j).
inline int64_t kv_cache_row(const KvBatch* kv, int64_t slot, int64_t j) {
  if (kv == nullptr || kv->block_tables == nullptr) return j;
  return static_cast<int64_t>(
             kv->block_tables[slot * kv->max_blocks_per_seq + j / kv->block_size]) *
             kv->block_size +
         j % kv->block_size;
}

}  // namespace mg
