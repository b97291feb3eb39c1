// The CPU attention kernel on raw pointers (testable alone, reusable by other attention ops).
#pragma once

#include <cstdint>

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
// already in k_cache [*, KV, D] and v_cache [*, KV, Dv] (row = position); sinks [H] or null;
// out [tokens, H * Dv]. `pool` may be null.
//
// Work is split into tiles of up to 16 query rows (a few tokens × the heads of one KV group)
// that stream the same keys: each key block is loaded once per tile instead of once per head.
// Softmax is single-pass ("online") with the running row max subtracted, accumulated directly
// in the output rows, so the kernel needs no scratch memory.
void attention_cpu(const AttentionDims& dims, const float* q, const int32_t* positions,
                   int64_t tokens, const float* k_cache, const float* v_cache, const float* sinks,
                   float* out, ThreadPool* pool);

}  // namespace mg
