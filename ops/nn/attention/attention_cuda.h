// CUDA attention launchers: the KV-cache write and causal GQA attention over the cache, with
// sliding window, chunks, sinks and v_head_dim != head_dim (semantics in attention.h).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "ops/nn/attention/attention_cpu.h"

namespace mg::cuda {

// Largest head_dim and v_head_dim the kernel holds in registers (16 elements per lane).
constexpr int64_t kAttentionMaxHeadDim = 512;

struct KvCacheWriteArgs {
  const void* k = nullptr;             // [tokens, kv_heads * head_dim]
  const void* v = nullptr;             // [tokens, kv_heads * v_head_dim]
  const int32_t* positions = nullptr;  // [tokens]
  void* k_cache = nullptr;             // [cache rows, kv_heads, head_dim]
  void* v_cache = nullptr;             // [cache rows, kv_heads, v_head_dim]
  int64_t tokens = 0;
  int64_t max_seq_len = 0;  // positions per sequence
  KvBatch kv;               // device pointers; all null: one contiguous sequence
};

struct AttentionArgs {
  const void* q = nullptr;             // [tokens, heads * head_dim]
  const int32_t* positions = nullptr;  // [tokens]
  const void* k_cache = nullptr;       // [cache rows, kv_heads, head_dim]
  const void* v_cache = nullptr;       // [cache rows, kv_heads, v_head_dim]
  const void* sinks = nullptr;         // [heads] or null
  void* out = nullptr;                 // [tokens, heads * v_head_dim]
  int64_t tokens = 0;
  int64_t max_seq_len = 0;  // positions per sequence
  KvBatch kv;               // device pointers; all null: one contiguous sequence
};

// Writes row t of k and v at the cache row of (its slot, positions[t]) (kv_batch.h). Positions
// outside [0, max_seq_len) and blocks outside the pool are skipped (the Session checks them on
// the host before a forward).
template <typename T>
void launch_kv_cache_write(const AttentionDims& dims, const KvCacheWriteArgs& args,
                           cudaStream_t stream);

// Query t attends to its sequence's positions [first visible, positions[t]] (through its block
// table when paged); fp32 scores and softmax. A query whose position lies outside the cache gets
// a NaN row. head_dim and v_head_dim <=
// kAttentionMaxHeadDim. T: float, __half or __nv_bfloat16 (attention_cuda_<dtype>.cu).
template <typename T>
void launch_attention(const AttentionDims& dims, const AttentionArgs& args, cudaStream_t stream);

}  // namespace mg::cuda
