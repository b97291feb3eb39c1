// CUDA attention kernels (included by the per-dtype attention_cuda_<dtype>.cu files).
//
// attention_kernel: one block of kWarps warps per (head h, query t). The visible keys
// [first, p] are dealt round-robin to the warps; each warp streams its keys one at a time:
// score s = scale · q·k (lanes split the head dim, a shuffle reduction sums), then the online
// softmax update of its running max m, denominator l and output accumulator (lanes split v's dim,
// kChunks elements per lane kept in registers). At the end the warps merge (m, l, acc) through
// shared memory; a sink adds exp(sink - M) to the denominator and nothing to the output.
// A warp's keys are a chain of dependent loads and reductions, so its time grows with the keys it
// owns: when the launch has few blocks (decode: one per head) the blocks take kDecodeWarps warps
// (a 512-key context is 16 keys per warp instead of 128; on the H100 a Qwen3-shaped layer's
// decode attention went from 174 µs to the figure in docs/performance.md), otherwise
// kAttentionWarps (many blocks already fill the GPU). With a paged cache (kv_batch.h) key j's
// row comes from the query's block table (one more load per key, cached in L1). K/V rows are still
// re-read by every head of a KV group (the L2 catches most of it).
#pragma once

#include <cmath>

#include "framework/device/cuda/cuda_check.h"
#include "framework/device/cuda/cuda_utils.cuh"
#include "ops/nn/attention/attention_cuda.h"

namespace mg::cuda {

constexpr int kAttentionWarps = 4;
constexpr int kDecodeWarps = 32;
// Below this many (head, query) blocks a launch takes kDecodeWarps warps per block.
constexpr int64_t kWideBlocksBelow = 1024;

// The block table row of query t's sequence, or null for a contiguous cache.
__device__ inline const int32_t* block_table_of(const KvBatch& kv, int64_t t) {
  if (kv.block_tables == nullptr) return nullptr;
  const int64_t slot = kv.row_slots != nullptr ? kv.row_slots[t] : 0;
  return kv.block_tables + slot * kv.max_blocks_per_seq;
}

// Cache row of position j (table from block_table_of).
__device__ inline int64_t cache_row(const KvBatch& kv, const int32_t* table, int64_t j) {
  if (table == nullptr) return j;
  return static_cast<int64_t>(table[j / kv.block_size]) * kv.block_size + j % kv.block_size;
}

template <typename T>
__global__ void kv_cache_write_kernel(const T* k, const T* v, const int32_t* positions, T* k_cache,
                                      T* v_cache, int64_t k_row, int64_t v_row, int64_t max_seq_len,
                                      KvBatch kv) {
  const int64_t t = blockIdx.x;
  const int64_t p = positions[t];
  if (p < 0 || p >= max_seq_len) return;
  const int32_t* table = block_table_of(kv, t);
  if (table != nullptr &&
      (table[p / kv.block_size] < 0 || table[p / kv.block_size] >= kv.num_blocks)) {
    return;
  }
  const int64_t row = cache_row(kv, table, p);
  for (int64_t i = threadIdx.x; i < k_row; i += blockDim.x)
    k_cache[row * k_row + i] = k[t * k_row + i];
  for (int64_t i = threadIdx.x; i < v_row; i += blockDim.x)
    v_cache[row * v_row + i] = v[t * v_row + i];
}

template <typename T>
void launch_kv_cache_write(const AttentionDims& dims, const KvCacheWriteArgs& a,
                           cudaStream_t stream) {
  if (a.tokens <= 0) return;
  kv_cache_write_kernel<T><<<static_cast<unsigned>(a.tokens), 128, 0, stream>>>(
      static_cast<const T*>(a.k), static_cast<const T*>(a.v), a.positions,
      static_cast<T*>(a.k_cache), static_cast<T*>(a.v_cache), dims.kv_heads * dims.head_dim,
      dims.kv_heads * dims.v_head_dim, a.max_seq_len, a.kv);
  MG_CUDA_CHECK_LAUNCH();
}

template <typename T, int kChunks, int kWarps>
__global__ void __launch_bounds__(kWarps * 32)
    attention_kernel(AttentionDims dims, const T* q, const int32_t* positions, const T* k_cache,
                     const T* v_cache, const T* sinks, T* out, int64_t max_seq_len, KvBatch kv) {
  __shared__ float warp_max_s[kWarps];
  __shared__ float warp_denom_s[kWarps];
  __shared__ float warp_acc_s[kWarps][kChunks * 32];

  const int64_t h = blockIdx.x;
  const int64_t t = blockIdx.y;
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int64_t d = dims.head_dim;
  const int64_t dv = dims.v_head_dim;
  const int64_t g = h / (dims.heads / dims.kv_heads);
  T* o = out + (t * dims.heads + h) * dv;
  const int64_t p = positions[t];
  if (p < 0 || p >= max_seq_len) {
    const T nan = from_float<T>(__int_as_float(0x7fc00000));
    for (int64_t i = threadIdx.x; i < dv; i += blockDim.x) o[i] = nan;
    return;
  }
  int64_t first = 0;
  if (dims.sliding_window > 0 && p - dims.sliding_window + 1 > first) {
    first = p - dims.sliding_window + 1;
  }
  if (dims.chunk_size > 0 && p - p % dims.chunk_size > first) first = p - p % dims.chunk_size;

  const T* q_row = q + (t * dims.heads + h) * d;
  float q_reg[kChunks];
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    const int64_t i = lane + 32 * c;
    q_reg[c] = i < d ? to_float(q_row[i]) : 0.0f;
  }

  constexpr float kNegInf = -INFINITY;
  float m = kNegInf;  // running max of this warp's scores
  float l = 0.0f;     // running Σ exp(s - m)
  float acc[kChunks];
#pragma unroll
  for (int c = 0; c < kChunks; ++c) acc[c] = 0.0f;

  const int64_t k_stride = dims.kv_heads * d;
  const int64_t v_stride = dims.kv_heads * dv;
  const T* k_head = k_cache + g * d;
  const T* v_head = v_cache + g * dv;
  const int32_t* table = block_table_of(kv, t);
  for (int64_t j = first + warp; j <= p; j += kWarps) {
    const int64_t row = cache_row(kv, table, j);
    const T* k_j = k_head + row * k_stride;
    float s = 0.0f;
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      const int64_t i = lane + 32 * c;
      if (i < d) s += q_reg[c] * to_float(k_j[i]);
    }
    s = warp_sum(s) * dims.scale;
    const float m_new = fmaxf(m, s);
    const float rescale = expf(m - m_new);  // 0 on the first key (m = -inf)
    const float weight = expf(s - m_new);
    l = l * rescale + weight;
    const T* v_j = v_head + row * v_stride;
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      const int64_t i = lane + 32 * c;
      const float v_i = i < dv ? to_float(v_j[i]) : 0.0f;
      acc[c] = acc[c] * rescale + weight * v_i;
    }
    m = m_new;
  }

  if (lane == 0) {
    warp_max_s[warp] = m;
    warp_denom_s[warp] = l;
  }
#pragma unroll
  for (int c = 0; c < kChunks; ++c) warp_acc_s[warp][lane + 32 * c] = acc[c];
  __syncthreads();

  // Key p is always visible, so at least one warp has a finite max and M is finite.
  const float sink = sinks != nullptr ? to_float(sinks[h]) : kNegInf;
  float row_max = sink;
  for (int w = 0; w < kWarps; ++w) row_max = fmaxf(row_max, warp_max_s[w]);
  float denom = sinks != nullptr ? expf(sink - row_max) : 0.0f;
  for (int w = 0; w < kWarps; ++w) {
    if (warp_max_s[w] != kNegInf) denom += warp_denom_s[w] * expf(warp_max_s[w] - row_max);
  }
  const float inv_denom = 1.0f / denom;
  for (int64_t i = threadIdx.x; i < dv; i += blockDim.x) {
    float v = 0.0f;
    for (int w = 0; w < kWarps; ++w) {
      if (warp_max_s[w] != kNegInf) v += warp_acc_s[w][i] * expf(warp_max_s[w] - row_max);
    }
    o[i] = from_float<T>(v * inv_denom);
  }
}

template <typename T, int kChunks, int kWarps>
void launch_attention_warps(const AttentionDims& dims, const AttentionArgs& a,
                            cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(dims.heads), static_cast<unsigned>(a.tokens));
  attention_kernel<T, kChunks, kWarps><<<grid, kWarps * 32, 0, stream>>>(
      dims, static_cast<const T*>(a.q), a.positions, static_cast<const T*>(a.k_cache),
      static_cast<const T*>(a.v_cache), static_cast<const T*>(a.sinks), static_cast<T*>(a.out),
      a.max_seq_len, a.kv);
  MG_CUDA_CHECK_LAUNCH();
}

template <typename T, int kChunks>
void launch_attention_chunks(const AttentionDims& dims, const AttentionArgs& a,
                             cudaStream_t stream) {
  // 32 warps of kChunks = 16 would need 64 KB of shared accumulators: wide blocks stop at 256.
  if constexpr (kChunks <= 8) {
    if (dims.heads * a.tokens < kWideBlocksBelow) {
      return launch_attention_warps<T, kChunks, kDecodeWarps>(dims, a, stream);
    }
  }
  launch_attention_warps<T, kChunks, kAttentionWarps>(dims, a, stream);
}

template <typename T>
void launch_attention(const AttentionDims& dims, const AttentionArgs& a, cudaStream_t stream) {
  if (a.tokens <= 0) return;
  const int64_t widest = dims.head_dim > dims.v_head_dim ? dims.head_dim : dims.v_head_dim;
  MG_ASSERT(widest <= kAttentionMaxHeadDim, "attention: head dim {} > {}", widest,
            kAttentionMaxHeadDim);
  if (widest <= 32) return launch_attention_chunks<T, 1>(dims, a, stream);
  if (widest <= 64) return launch_attention_chunks<T, 2>(dims, a, stream);
  if (widest <= 128) return launch_attention_chunks<T, 4>(dims, a, stream);
  if (widest <= 256) return launch_attention_chunks<T, 8>(dims, a, stream);
  return launch_attention_chunks<T, 16>(dims, a, stream);
}

}  // namespace mg::cuda
