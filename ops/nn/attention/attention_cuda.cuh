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
// re-read by every head of a KV group (the L2 catches most of it). This kernel serves prefill.
//
// Split-KV decode (flash-decoding; attention_split_kv_kernel + attention_split_kv_combine_kernel):
// for few query rows (split_kv_chosen in attention_cuda.h) the grid is (split, KV head × head
// tile, row). A block takes one contiguous slice of its row's visible keys and every query head of
// its GQA group (up to kSplitKvMaxHeads): in tiles of 128 keys, 8 lanes score one key against all
// the block's heads (its K row read once in 16-byte chunks, all of a lane's loads in flight
// together, q from shared memory; shuffles sum the lanes), a warp per head does the tile's
// online-softmax update, then groups of threads (each thread a 16-byte slice of v, 4 keys' slices
// in flight) accumulate P·V for every head in registers. The block leaves (max, denominator,
// unnormalised output) per head in the workspace; the combine kernel, one block per (head, row),
// rescales the splits to their common max, adds the sink and writes the row (or NaN for a
// position outside the cache). On the H100 the two kernels cost 19.4 µs at 512 keys for ~1 MB of
// K and V, 30.0 at 4096 against the per-query kernel's 160 (docs/performance.md, issue 15): a
// 128-key tile still waits one memory latency per score pass and per P·V round. The workspace is
// planned from the launch's bounds (split_kv_workspace_bytes) and nothing syncs with the host, so
// both kernels go into CUDA graphs.
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

// First visible position of a query at position p: window and chunk (attention.h).
__device__ inline int64_t first_visible(const AttentionDims& dims, int64_t p) {
  int64_t first = 0;
  if (dims.sliding_window > 0 && p - dims.sliding_window + 1 > first) {
    first = p - dims.sliding_window + 1;
  }
  if (dims.chunk_size > 0 && p - p % dims.chunk_size > first) first = p - p % dims.chunk_size;
  return first;
}

// Keys per split of a row with `keys` visible keys and at most `splits` splits; the row uses
// ceil(keys / per) splits, none of them empty. Both split-KV kernels derive it the same way.
__device__ inline int64_t split_kv_keys_per_split(int64_t keys, int64_t splits) {
  int64_t used = (keys + kSplitKvMinKeys - 1) / kSplitKvMinKeys;
  if (used > splits) used = splits;
  return (keys + used - 1) / used;
}

constexpr int kSplitKvThreads = 128;  // also the keys of one tile (one key per thread scores)
constexpr int kSplitKvWarps = kSplitKvThreads / 32;
// At most this many threads share one v slice (key groups of the P·V loop): their accumulators
// are summed one group at a time at the end.
constexpr int kSplitKvMaxKeyGroups = 16;
// Lanes that read one key row together in the score phase (a power of two dividing 32), and the
// keys a block scores per pass.
constexpr int kSplitKvLanesPerKey = 8;
constexpr int kSplitKvKeysPerPass = kSplitKvThreads / kSplitKvLanesPerKey;
// V rows a thread of the P·V loop has in flight at once.
constexpr int kSplitKvVLoads = 4;

// Partials: acc [tokens, heads, splits, Dv] then stats [tokens, heads, splits, 2] (max, denom).
template <typename T, int kHeads>
__global__ void __launch_bounds__(kSplitKvThreads)
    attention_split_kv_kernel(AttentionDims dims, const T* q, const int32_t* positions,
                              const T* k_cache, const T* v_cache, int64_t max_seq_len, KvBatch kv,
                              int64_t splits, int64_t head_tiles, float* part_acc,
                              float* part_stats) {
  constexpr int kVec = static_cast<int>(16 / sizeof(T));
  // q of the block's heads while scoring; the summed accumulators at the end.
  __shared__ float head_s[kHeads][kAttentionMaxHeadDim];
  __shared__ float prob_s[kHeads][kSplitKvThreads];  // the tile's scores, then exp(s - max)
  __shared__ int64_t row_s[kSplitKvThreads];         // the tile's cache rows
  __shared__ float max_s[kHeads], denom_s[kHeads], rescale_s[kHeads];

  const int64_t split = blockIdx.x;
  const int64_t g = blockIdx.y / head_tiles;
  const int64_t tile = blockIdx.y % head_tiles;
  const int64_t t = blockIdx.z;
  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int64_t p = positions[t];
  if (p < 0 || p >= max_seq_len) return;  // the combine writes the NaN row
  const int64_t first = first_visible(dims, p);
  const int64_t per = split_kv_keys_per_split(p - first + 1, splits);
  const int64_t begin = first + split * per;
  if (begin > p) return;  // a split this row does not use
  const int64_t end = begin + per < p + 1 ? begin + per : p + 1;

  const int64_t d = dims.head_dim;
  const int64_t dv = dims.v_head_dim;
  const int64_t group = dims.heads / dims.kv_heads;
  const int64_t h0 = g * group + tile * kSplitKvMaxHeads;
  const int64_t left = group - tile * kSplitKvMaxHeads;
  const int nh = left < kHeads ? static_cast<int>(left) : kHeads;  // heads of this block

  // q of the block's heads: one 16-byte load per thread where q is aligned (one round of
  // memory latency instead of one per element a thread copies).
  if (reinterpret_cast<uintptr_t>(q) % 16 == 0) {
    for (int64_t i = tid * kVec; i < kHeads * d; i += kSplitKvThreads * kVec) {
      const int hh = static_cast<int>(i / d);
      const int64_t c = i % d;
      if (hh < nh) {
        const uint4 raw =
            __ldg(reinterpret_cast<const uint4*>(q + (t * dims.heads + h0 + hh) * d + c));
        const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
        for (int x = 0; x < kVec; ++x) head_s[hh][c + x] = to_float(e[x]);
      } else {
#pragma unroll
        for (int x = 0; x < kVec; ++x) head_s[hh][c + x] = 0.0f;
      }
    }
  } else {
    for (int64_t i = tid; i < kHeads * d; i += kSplitKvThreads) {
      const int hh = static_cast<int>(i / d);
      head_s[hh][i % d] = hh < nh ? to_float(q[(t * dims.heads + h0 + hh) * d + i % d]) : 0.0f;
    }
  }
  if (tid < kHeads) {
    max_s[tid] = -INFINITY;
    denom_s[tid] = 0.0f;
  }

  // P·V layout: thread = (key group, 16-byte slice of v).
  const int slices = static_cast<int>(dv / kVec);
  int key_groups = kSplitKvThreads / slices;
  if (key_groups > kSplitKvMaxKeyGroups) key_groups = kSplitKvMaxKeyGroups;
  const int slice = tid % slices;
  const int key_group = tid / slices;
  float acc[kHeads][kVec];
#pragma unroll
  for (int hh = 0; hh < kHeads; ++hh) {
#pragma unroll
    for (int e = 0; e < kVec; ++e) acc[hh][e] = 0.0f;
  }

  const T* k_head = k_cache + g * d;
  const T* v_head = v_cache + g * dv;
  const int64_t k_stride = dims.kv_heads * d;
  const int64_t v_stride = dims.kv_heads * dv;
  const int32_t* table = block_table_of(kv, t);
  __syncthreads();

  for (int64_t tile_begin = begin; tile_begin < end; tile_begin += kSplitKvThreads) {
    const int tile_keys =
        end - tile_begin < kSplitKvThreads ? static_cast<int>(end - tile_begin) : kSplitKvThreads;
    // Scores: kSplitKvLanesPerKey lanes read one key row together (16-byte chunks, every load of
    // a lane issued before any is used: the kernel is bound by memory latency, not bandwidth, at
    // decode sizes) and reduce its dot products with every head of the block by shuffles.
    for (int j = tid / kSplitKvLanesPerKey; j < kSplitKvThreads; j += kSplitKvKeysPerPass) {
      const int sub = tid % kSplitKvLanesPerKey;
      float dot[kHeads];
#pragma unroll
      for (int hh = 0; hh < kHeads; ++hh) dot[hh] = 0.0f;
      if (j < tile_keys) {
        const int64_t row = cache_row(kv, table, tile_begin + j);
        if (sub == 0) row_s[j] = row;
        const T* k_j = k_head + row * k_stride;
        constexpr int kChunks = kAttentionMaxHeadDim / kVec / kSplitKvLanesPerKey;
        uint4 raw[kChunks];
#pragma unroll
        for (int i = 0; i < kChunks; ++i) {
          const int64_t c = (static_cast<int64_t>(i) * kSplitKvLanesPerKey + sub) * kVec;
          if (c < d) raw[i] = __ldg(reinterpret_cast<const uint4*>(k_j + c));
        }
#pragma unroll
        for (int i = 0; i < kChunks; ++i) {
          const int64_t c = (static_cast<int64_t>(i) * kSplitKvLanesPerKey + sub) * kVec;
          if (c < d) {
            const T* e = reinterpret_cast<const T*>(&raw[i]);
#pragma unroll
            for (int hh = 0; hh < kHeads; ++hh) {
#pragma unroll
              for (int x = 0; x < kVec; ++x) dot[hh] += head_s[hh][c + x] * to_float(e[x]);
            }
          }
        }
      }
#pragma unroll
      for (int hh = 0; hh < kHeads; ++hh) {
#pragma unroll
        for (int off = kSplitKvLanesPerKey / 2; off > 0; off /= 2) {
          dot[hh] += __shfl_xor_sync(0xffffffffu, dot[hh], off);
        }
      }
      if (sub == 0) {
#pragma unroll
        for (int hh = 0; hh < kHeads; ++hh) {
          prob_s[hh][j] = j < tile_keys ? dot[hh] * dims.scale : -INFINITY;
        }
      }
    }
    __syncthreads();

    // Online softmax over the tile: one warp per head.
    for (int hh = warp; hh < kHeads; hh += kSplitKvWarps) {
      float tile_max = -INFINITY;
      for (int j = lane; j < kSplitKvThreads; j += 32) tile_max = fmaxf(tile_max, prob_s[hh][j]);
      tile_max = warp_max(tile_max);
      const float m_old = max_s[hh];
      const float m_new = fmaxf(m_old, tile_max);
      float sum = 0.0f;
      for (int j = lane; j < kSplitKvThreads; j += 32) {
        const float w = expf(prob_s[hh][j] - m_new);  // 0 past the tile's keys
        prob_s[hh][j] = w;
        sum += w;
      }
      sum = warp_sum(sum);
      if (lane == 0) {
        const float rescale = expf(m_old - m_new);  // 0 on the first tile (m_old = -inf)
        rescale_s[hh] = rescale;
        denom_s[hh] = denom_s[hh] * rescale + sum;
        max_s[hh] = m_new;
      }
    }
    __syncthreads();

    if (key_group < key_groups) {
#pragma unroll
      for (int hh = 0; hh < kHeads; ++hh) {
        const float rescale = rescale_s[hh];
#pragma unroll
        for (int e = 0; e < kVec; ++e) acc[hh][e] *= rescale;
      }
      // kSplitKvVLoads keys' v slices loaded before any is used (memory-level parallelism).
      for (int j0 = key_group; j0 < tile_keys; j0 += kSplitKvVLoads * key_groups) {
        uint4 raw[kSplitKvVLoads];
#pragma unroll
        for (int u = 0; u < kSplitKvVLoads; ++u) {
          const int j = j0 + u * key_groups;
          if (j < tile_keys) {
            raw[u] =
                __ldg(reinterpret_cast<const uint4*>(v_head + row_s[j] * v_stride + slice * kVec));
          }
        }
#pragma unroll
        for (int u = 0; u < kSplitKvVLoads; ++u) {
          const int j = j0 + u * key_groups;
          if (j < tile_keys) {
            const T* e = reinterpret_cast<const T*>(&raw[u]);
#pragma unroll
            for (int hh = 0; hh < kHeads; ++hh) {
              const float w = prob_s[hh][j];
#pragma unroll
              for (int x = 0; x < kVec; ++x) acc[hh][x] += w * to_float(e[x]);
            }
          }
        }
      }
    }
    __syncthreads();  // the next tile overwrites prob_s and row_s
  }

  // Sum the key groups' accumulators in head_s (q is no longer needed), one group at a time so
  // that the result does not depend on scheduling.
  for (int64_t i = tid; i < kHeads * dv; i += kSplitKvThreads) head_s[i / dv][i % dv] = 0.0f;
  __syncthreads();
  for (int kg = 0; kg < key_groups; ++kg) {
    if (key_group == kg) {
#pragma unroll
      for (int hh = 0; hh < kHeads; ++hh) {
#pragma unroll
        for (int e = 0; e < kVec; ++e) head_s[hh][slice * kVec + e] += acc[hh][e];
      }
    }
    __syncthreads();
  }

  const int64_t slot0 = (t * dims.heads + h0) * splits + split;  // head h0 + hh: + hh * splits
  for (int64_t i = tid; i < nh * dv; i += kSplitKvThreads) {
    const int64_t hh = i / dv;
    part_acc[(slot0 + hh * splits) * dv + i % dv] = head_s[hh][i % dv];
  }
  if (tid < nh) {
    part_stats[(slot0 + tid * splits) * 2] = max_s[tid];
    part_stats[(slot0 + tid * splits) * 2 + 1] = denom_s[tid];
  }
}

template <typename T>
__global__ void __launch_bounds__(kSplitKvThreads)
    attention_split_kv_combine_kernel(AttentionDims dims, const int32_t* positions, const T* sinks,
                                      T* out, int64_t max_seq_len, int64_t splits,
                                      const float* part_acc, const float* part_stats) {
  __shared__ float max_s[kSplitKvMaxSplits], weight_s[kSplitKvMaxSplits];
  __shared__ float row_max_s, denom_s;
  const int64_t h = blockIdx.x;
  const int64_t t = blockIdx.y;
  const int64_t dv = dims.v_head_dim;
  T* o = out + (t * dims.heads + h) * dv;
  const int64_t p = positions[t];
  if (p < 0 || p >= max_seq_len) {
    const T nan = from_float<T>(__int_as_float(0x7fc00000));
    for (int64_t i = threadIdx.x; i < dv; i += blockDim.x) o[i] = nan;
    return;
  }
  const int64_t keys = p - first_visible(dims, p) + 1;
  const int64_t per = split_kv_keys_per_split(keys, splits);
  const int64_t used = (keys + per - 1) / per;
  const int64_t slot0 = (t * dims.heads + h) * splits;

  // The splits' stats into shared memory in one round of loads, then warp 0 reduces them (the
  // kernel is bound by memory latency: no loop may wait on one load after another).
  for (int64_t s = threadIdx.x; s < used; s += blockDim.x) {
    max_s[s] = part_stats[(slot0 + s) * 2];
    weight_s[s] = part_stats[(slot0 + s) * 2 + 1];  // the split's denominator, until below
  }
  __syncthreads();
  if (threadIdx.x < 32) {
    // Every split has a key, so every split max is finite and so is the row max.
    const float sink = sinks != nullptr ? to_float(sinks[h]) : -INFINITY;
    float row_max = sink;
    for (int64_t s = threadIdx.x; s < used; s += 32) row_max = fmaxf(row_max, max_s[s]);
    row_max = warp_max(row_max);
    float denom = 0.0f;
    for (int64_t s = threadIdx.x; s < used; s += 32) {
      denom += weight_s[s] * expf(max_s[s] - row_max);
    }
    denom = warp_sum(denom);
    if (threadIdx.x == 0) {
      row_max_s = row_max;
      denom_s = denom + (sinks != nullptr ? expf(sink - row_max) : 0.0f);
    }
  }
  __syncthreads();
  for (int64_t s = threadIdx.x; s < used; s += blockDim.x) {
    weight_s[s] = expf(max_s[s] - row_max_s) / denom_s;
  }
  __syncthreads();
  constexpr int kBatch = 8;  // splits' partial rows in flight per thread
  for (int64_t i = threadIdx.x; i < dv; i += blockDim.x) {
    float v = 0.0f;
    for (int64_t s0 = 0; s0 < used; s0 += kBatch) {
      float part[kBatch];
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        part[u] = s0 + u < used ? part_acc[(slot0 + s0 + u) * dv + i] : 0.0f;
      }
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        if (s0 + u < used) v += part[u] * weight_s[s0 + u];
      }
    }
    o[i] = from_float<T>(v);
  }
}

template <typename T, int kHeads>
void launch_split_kv_heads(const AttentionDims& dims, const AttentionArgs& a, int64_t splits,
                           float* part_acc, float* part_stats, cudaStream_t stream) {
  const int64_t head_tiles = split_kv_head_tiles(dims);
  const dim3 grid(static_cast<unsigned>(splits), static_cast<unsigned>(dims.kv_heads * head_tiles),
                  static_cast<unsigned>(a.tokens));
  attention_split_kv_kernel<T, kHeads><<<grid, kSplitKvThreads, 0, stream>>>(
      dims, static_cast<const T*>(a.q), a.positions, static_cast<const T*>(a.k_cache),
      static_cast<const T*>(a.v_cache), a.max_seq_len, a.kv, splits, head_tiles, part_acc,
      part_stats);
  MG_CUDA_CHECK_LAUNCH();
}

// The split kernel's 16-byte loads need the caches' bases aligned (device allocations are; a
// view at an odd offset would not be).
inline bool caches_16_byte_aligned(const AttentionArgs& a) {
  return reinterpret_cast<uintptr_t>(a.k_cache) % 16 == 0 &&
         reinterpret_cast<uintptr_t>(a.v_cache) % 16 == 0;
}

template <typename T>
void launch_attention_split_kv(const AttentionDims& dims, const AttentionArgs& a,
                               cudaStream_t stream) {
  MG_ASSERT(split_kv_supports(dims, sizeof(T)) && caches_16_byte_aligned(a),
            "attention: split-KV needs 16-byte K/V rows, head_dim {} v_head_dim {} of {} bytes "
            "(caches at {} and {})",
            dims.head_dim, dims.v_head_dim, sizeof(T), a.k_cache, a.v_cache);
  MG_ASSERT(a.tokens <= 65535, "attention: split-KV launch of {} rows", a.tokens);
  const int64_t splits = a.splits > 0 ? std::min(a.splits, kSplitKvMaxSplits)
                                      : split_kv_splits(dims, a.tokens, a.max_seq_len, a.sm_count);
  const size_t need = split_kv_workspace_bytes(dims, a.tokens, splits);
  MG_ASSERT(a.workspace != nullptr && a.workspace_bytes >= need,
            "attention: split-KV workspace of {} bytes, need {}", a.workspace_bytes, need);
  float* part_acc = static_cast<float*>(a.workspace);
  float* part_stats = part_acc + a.tokens * dims.heads * splits * dims.v_head_dim;
  const int64_t heads_per_block = std::min(dims.heads / dims.kv_heads, kSplitKvMaxHeads);
  if (heads_per_block == 1) {
    launch_split_kv_heads<T, 1>(dims, a, splits, part_acc, part_stats, stream);
  } else if (heads_per_block == 2) {
    launch_split_kv_heads<T, 2>(dims, a, splits, part_acc, part_stats, stream);
  } else if (heads_per_block <= 4) {
    launch_split_kv_heads<T, 4>(dims, a, splits, part_acc, part_stats, stream);
  } else {
    launch_split_kv_heads<T, 8>(dims, a, splits, part_acc, part_stats, stream);
  }
  const dim3 grid(static_cast<unsigned>(dims.heads), static_cast<unsigned>(a.tokens));
  attention_split_kv_combine_kernel<T><<<grid, kSplitKvThreads, 0, stream>>>(
      dims, a.positions, static_cast<const T*>(a.sinks), static_cast<T*>(a.out), a.max_seq_len,
      splits, part_acc, part_stats);
  MG_CUDA_CHECK_LAUNCH();
}

template <typename T>
void launch_attention(const AttentionDims& dims, const AttentionArgs& a, cudaStream_t stream) {
  if (a.tokens <= 0) return;
  const int64_t widest = dims.head_dim > dims.v_head_dim ? dims.head_dim : dims.v_head_dim;
  MG_ASSERT(widest <= kAttentionMaxHeadDim, "attention: head dim {} > {}", widest,
            kAttentionMaxHeadDim);
  switch (a.path) {
    case AttentionPath::kAuto:
      if (caches_16_byte_aligned(a) &&
          split_kv_chosen(dims, sizeof(T), a.tokens, a.max_seq_len, a.sm_count,
                          a.workspace != nullptr ? a.workspace_bytes : 0)) {
        return launch_attention_split_kv<T>(dims, a, stream);
      }
      break;
    case AttentionPath::kSplitKv:
      return launch_attention_split_kv<T>(dims, a, stream);
    case AttentionPath::kPerQuery:
      break;
  }
  if (widest <= 32) return launch_attention_chunks<T, 1>(dims, a, stream);
  if (widest <= 64) return launch_attention_chunks<T, 2>(dims, a, stream);
  if (widest <= 128) return launch_attention_chunks<T, 4>(dims, a, stream);
  if (widest <= 256) return launch_attention_chunks<T, 8>(dims, a, stream);
  return launch_attention_chunks<T, 16>(dims, a, stream);
}

}  // namespace mg::cuda
