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
// re-read by every head of a KV group (the L2 catches most of it). This kernel serves the
// prefill launches the flash prefill kernel (attention_flash_cuda.cuh) does not take.
//
// Split-KV decode (flash-decoding; attention_split_kv_kernel): for few query rows, and paged
// batches of decode rows the flash kernel does not take (split_kv_chosen,
// split_kv_chosen_for_paged_batch in attention_cuda.h), the grid is (split, KV head × head tile,
// row). A block takes one contiguous slice of its row's visible keys and every query head of its
// GQA group (up to kSplitKvMaxHeads). At decode sizes the bytes are tiny (a 512-key Qwen3 layer
// reads 1 MB of K and V) and the time is chains of memory latency, so the kernel is built to wait
// as few times as possible:
//  - the K and V rows of a tile (kSplitKvTileKeys keys) are copied to shared memory with
//    cp.async, every 16-byte piece issued at once, and the next tile's copies are issued before
//    this tile's math (two stages), so a block waits about one memory latency in all rather than
//    one per pass of 16 keys;
//  - with the cache write inside (below), the position, the split's keys and the first tile's
//    cache rows are loaded before the kernel's pdl_wait, while the kernel before it (q/k norm +
//    rope) still runs: those rows were written by earlier steps, and only q and the call's own
//    rows are read after the wait (pdl.cuh, rule 1 and its exception);
//  - a block whose split is shorter than the launch's tile uses the smallest power-of-two tile
//    that holds it (a 512-key Qwen3 row in 32 splits: tiles of 16 keys), so that every warp
//    scores;
//  - scores: threads/tile lanes per key split its K row, dot it with every head's q (shared
//    memory) and sum by a transposed butterfly of shuffles (each offset halves the heads a lane
//    holds: 8 shuffles for 8 heads over 16 lanes, not 32); a warp per head does the
//    online-softmax update;
//  - P·V: a thread owns 4 consecutive output elements of one head and sums them over the tile's
//    keys, so no reduction across threads is needed;
//  - combine: each block leaves (max, denominator, unnormalised output) per head in the
//    workspace and counts its arrival on a per-(row, KV head, head tile) counter (one thread, one
//    acq_rel atomic after a barrier: no per-thread fences); the last block to arrive merges the
//    splits: a warp per head turns the splits' (max, denominator) and the sink into one weight
//    per split (shared memory), while the first 16 splits' partials are already in flight, then
//    each thread sums its 4 output elements' partials times the weights and writes the row (or
//    NaN for a position outside the cache); it resets the counter. One launch instead of a split
//    kernel and a combine kernel;
//  - the KV-cache write (given the call's k and v, attention_fuses_kv_write): also one launch
//    instead of kv_cache_write then attention. A block reads every key of its range that this
//    call writes from k/v instead of the cache: each warp lists the call's rows of the block's
//    sequence whose positions fall in the block's keys (at most kSplitKvFusedWriteMaxTokens
//    rows; a chunk's row t sees the rows < t of its sequence this way), and a key found in the
//    list is copied from that row of k/v. So no block reads a cache row this launch writes
//    (slots own disjoint blocks: KvBlockPool), and the block holding key p of (row, KV head), the
//    last of its split, with head tile 0, stores the row from shared memory into the cache
//    (kv_cache_write_kernel's checks: positions outside the cache and blocks outside the pool are
//    skipped).
// The split count aims at one wave of two blocks an SM (split_kv_splits). The workspace is planned
// from the launch's bounds (split_kv_workspace_bytes), the counters live in the op's state, and
// nothing syncs with the host, so the kernel goes into CUDA graphs. docs/performance.md (issue 15)
// has the timings.
#pragma once

#include <cmath>

#include "framework/device/cuda/cuda_check.h"
#include "framework/device/cuda/cuda_utils.cuh"
#include "framework/device/cuda/dynamic_shared.cuh"
#include "framework/device/cuda/pdl.cuh"
#include "ops/nn/attention/attention_cuda.h"
#include "ops/nn/attention/attention_flash_cuda.cuh"

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
  pdl_wait();  // k, v and positions come from before; attention may still read the cache rows
  pdl_launch_dependents();
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
  launch_pdl(kv_cache_write_kernel<T>, dim3(static_cast<unsigned>(a.tokens)), dim3(128), 0, stream,
             static_cast<const T*>(a.k), static_cast<const T*>(a.v), a.positions,
             static_cast<T*>(a.k_cache), static_cast<T*>(a.v_cache), dims.kv_heads * dims.head_dim,
             dims.kv_heads * dims.v_head_dim, a.max_seq_len, a.kv);
}

template <typename T, int kChunks, int kWarps>
__global__ void __launch_bounds__(kWarps * 32)
    attention_kernel(AttentionDims dims, const T* q, const int32_t* positions, const T* k_cache,
                     const T* v_cache, const T* sinks, T* out, int64_t max_seq_len, KvBatch kv) {
  __shared__ float warp_max_s[kWarps];
  __shared__ float warp_denom_s[kWarps];
  __shared__ float warp_acc_s[kWarps][kChunks * 32];
  pdl_wait();  // q, positions and the cache come from before (launch_pdl, pdl.cuh)
  pdl_launch_dependents();

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
  launch_pdl(attention_kernel<T, kChunks, kWarps>, grid, dim3(kWarps * 32), 0, stream, dims,
             static_cast<const T*>(a.q), a.positions, static_cast<const T*>(a.k_cache),
             static_cast<const T*>(a.v_cache), static_cast<const T*>(a.sinks),
             static_cast<T*>(a.out), a.max_seq_len, a.kv);
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
// ceil(keys / per) splits, none of them empty. Every block of the row derives it the same way.
// 32-bit: positions are int32, and a 64-bit division is a long dependent chain at every block's
// start.
__device__ inline int split_kv_keys_per_split(int keys, int splits) {
  int used = (keys + static_cast<int>(kSplitKvMinKeys) - 1) / static_cast<int>(kSplitKvMinKeys);
  if (used > splits) used = splits;
  return (keys + used - 1) / used;
}

// cache_row for the split kernel: 32-bit positions and block size (see split_kv_keys_per_split).
__device__ inline int64_t split_kv_cache_row(const int32_t* table, int block_size, int j) {
  if (table == nullptr) return j;
  return static_cast<int64_t>(table[j / block_size]) * block_size + j % block_size;
}

constexpr int kSplitKvThreads = 256;
constexpr int kSplitKvWarps = kSplitKvThreads / 32;

// 16 bytes global → shared without passing through registers (cp.async, sm_80+; .cg: L2 only,
// K and V are read once per block). Older targets copy through registers, with no overlap.
__device__ __forceinline__ void split_kv_copy_16(void* dst, const void* src) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const auto shared = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(shared), "l"(src));
#else
  *static_cast<uint4*>(dst) = *static_cast<const uint4*>(src);
#endif
}
__device__ __forceinline__ void split_kv_commit_copies() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::);
#endif
}
// Waits for every committed group of copies but the newest (the tile copied ahead).
__device__ __forceinline__ void split_kv_wait_all_but_newest() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group 1;\n" ::);
#endif
}

// Counts a block's arrival: atomically adds 1 to *counter and returns the old value, with
// acquire-release semantics at GPU scope (sm_70+; older targets: fences around a relaxed add).
// Called by one thread after a __syncthreads(): the release covers the block's writes.
__device__ __forceinline__ unsigned split_kv_arrive(unsigned* counter) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 700
  unsigned old;
  asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], 1;\n"
               : "=r"(old)
               : "l"(counter)
               : "memory");
  return old;
#else
  __threadfence();
  const unsigned old = atomicAdd(counter, 1u);
  __threadfence();
  return old;
#endif
}

// Four consecutive elements (8 or 16 bytes, aligned) as floats, and back.
template <typename T>
__device__ __forceinline__ void load4(const T* src, float (&out)[4]) {
  if constexpr (sizeof(T) == 4) {
    const float4 v = *reinterpret_cast<const float4*>(src);
    out[0] = v.x, out[1] = v.y, out[2] = v.z, out[3] = v.w;
  } else {
    const uint2 raw = *reinterpret_cast<const uint2*>(src);
    const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int x = 0; x < 4; ++x) out[x] = to_float(e[x]);
  }
}
template <typename T>
__device__ __forceinline__ void store4(T* dst, const float (&in)[4]) {
  if constexpr (sizeof(T) == 4) {
    *reinterpret_cast<float4*>(dst) = make_float4(in[0], in[1], in[2], in[3]);
  } else {
    uint2 raw;
    T* e = reinterpret_cast<T*>(&raw);
#pragma unroll
    for (int x = 0; x < 4; ++x) e[x] = from_float<T>(in[x]);
    *reinterpret_cast<uint2*>(dst) = raw;
  }
}

// One split of one (row t, KV head g, head tile): keys [begin, end) against the block's nh query
// heads. Partials: acc [tokens, heads, splits, Dv] then stats [tokens, heads, splits, 2] (max,
// denominator); the last block of the (t, g, head tile) to finish combines them into `out`.
// Dynamic shared memory: split_kv_shared_bytes(dims, sizeof(T), tile), plus ~6 KB static (the
// warps' fused-write lists, the merge's weights). Two blocks per SM (at most 128 registers a
// thread; ptxas -v on sm_90a: 128 with 8 heads, 106-111 otherwise, no spills): batched decode
// launches more blocks than SMs. Barriers: 3 per tile (copies landed, scores, softmax) and one
// between tiles, 2 around the arrival, 1 in the merge; none in the set-up.
template <typename T, int kHeads>
__global__ void __launch_bounds__(kSplitKvThreads, 2)
    attention_split_kv_kernel(AttentionDims dims, const T* q, const int32_t* positions,
                              const T* k_new, const T* v_new, T* k_cache, T* v_cache,
                              const T* sinks, T* out, int64_t max_seq_len, KvBatch kv, int splits,
                              int group, int head_tiles, int launch_tile, float* part_acc,
                              float* part_stats, unsigned* counters, bool early) {
  constexpr int kVec = static_cast<int>(16 / sizeof(T));  // elements of one 16-byte copy
  // Output elements (4 at a time) per thread: kHeads heads of up to kAttentionMaxHeadDim.
  constexpr int kOutChunks =
      (kHeads * static_cast<int>(kAttentionMaxHeadDim) / 4 + kSplitKvThreads - 1) / kSplitKvThreads;
  extern __shared__ __align__(16) unsigned char split_kv_shared[];
  __shared__ float max_s[kHeads], denom_s[kHeads], rescale_s[kHeads];
  __shared__ bool last_s;
  __shared__ float merge_w_s[kHeads][kSplitKvMaxSplits];  // the combine's weight per split
  // The fused write's list: positions in this block's keys that rows of this call write, and the
  // row (of k_new / v_new) that writes each. Each warp builds its own copy (no block barrier).
  static_assert(kSplitKvFusedWriteMaxTokens <= 64, "a warp lists the rows in two rounds of 32");
  __shared__ int fresh_pos_s[kSplitKvWarps][kSplitKvFusedWriteMaxTokens];
  __shared__ int fresh_row_s[kSplitKvWarps][kSplitKvFusedWriteMaxTokens];

  const int d = static_cast<int>(dims.head_dim);
  const int dv = static_cast<int>(dims.v_head_dim);
  // [2 stages][tile keys][d + dv]: a stage holds a tile's K rows, then its V rows.
  T* stages_s = reinterpret_cast<T*>(split_kv_shared);
  // (Laid out for the launch's tile; a block may use shorter tiles, see `tile` below.)
  float* q_s = reinterpret_cast<float*>(
      split_kv_shared + static_cast<size_t>(2 * launch_tile * (d + dv)) * sizeof(T));
  float* score_s = q_s + kHeads * d;                                            // [kHeads][tile]
  int64_t* row_s = reinterpret_cast<int64_t*>(score_s + kHeads * launch_tile);  // [2][tile]

  const int split = static_cast<int>(blockIdx.x);
  const int g =
      head_tiles == 1 ? static_cast<int>(blockIdx.y) : static_cast<int>(blockIdx.y) / head_tiles;
  const int head_tile = static_cast<int>(blockIdx.y) - g * head_tiles;
  const int64_t t = blockIdx.z;
  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int64_t h0 = static_cast<int64_t>(g) * group + head_tile * kSplitKvMaxHeads;
  const int left = group - head_tile * static_cast<int>(kSplitKvMaxHeads);
  const int nh = left < kHeads ? left : kHeads;  // heads of this block

  // Before the wait (pdl.cuh, rule 1 and this kernel's exception there): the position, the
  // split's key range, the fused write's list and the first tile's cache rows. The positions, row
  // slots and block tables are the step's inputs, copied from the host before its first kernel
  // (no op yields I32 values), and in a fused launch (k_new given) the cache rows it reads were
  // written by earlier steps' launches, complete: no kernel of this step writes this layer's
  // cache before this one. So those loads wait while q/k norm + rope still runs, and after the
  // wait only q and the call's own rows (k_new / v_new) are read before the first scores.
  const int p = __ldg(positions + t);
  // Fused write (k_new given): every warp loads every row's position and slot now (L1 hits but
  // for the first), so that these loads wait together with p's.
  const bool fused = k_new != nullptr;
  const bool paged = kv.block_tables != nullptr;
  const int tokens = static_cast<int>(gridDim.z);
  int row_pos[2] = {-1, -1}, row_slot[2] = {0, 0}, own_slot = 0;
  if (fused) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int u = lane + 32 * r;
      if (u < tokens) {
        row_pos[r] = __ldg(positions + u);
        if (paged && kv.row_slots != nullptr) row_slot[r] = __ldg(kv.row_slots + u);
      }
    }
    if (paged && kv.row_slots != nullptr) own_slot = __ldg(kv.row_slots + t);
  }
  if (tid < kHeads) {
    max_s[tid] = -INFINITY;
    denom_s[tid] = 0.0f;
  }
  // A position outside the cache makes a NaN row (written by split 0 after the wait).
  const bool valid = p >= 0 && p < max_seq_len;
  const int first = valid ? static_cast<int>(first_visible(dims, p)) : 0;
  const int keys = valid ? p - first + 1 : 1;
  const int per = split_kv_keys_per_split(keys, splits);
  const int used = (keys + per - 1) / per;  // splits of this row
  const int begin = first + split * per;
  const bool active = valid && begin <= p;  // else a split this row does not use
  const int end = begin + per < p + 1 ? begin + per : p + 1;
  // Keys per tile: the launch's, or for a shorter split the smallest power of two that holds it
  // (at least kSplitKvMinTileKeys), so that more lanes split each key's K row and every warp
  // scores: a 16-key split is one tile of 16 keys, 16 lanes a key, all 8 warps (a 64-key tile
  // left it to 4 lanes a key in warps 0 and 1, four passes each while six warps waited).
  int tile = launch_tile;
  while (tile / 2 >= per && tile / 2 >= static_cast<int>(kSplitKvMinTileKeys)) tile /= 2;
  const int tile_shift = __ffs(tile) - 1;  // tile is a power of two: shifts, not divisions
  const int tiles = active ? (end - begin + tile - 1) >> tile_shift : 0;

  // The fused write's list (this warp's copy): rows of this call of the same sequence (a
  // contiguous cache is one) whose positions are keys of [begin, end), compacted by ballots.
  int fresh_count = 0;  // the same in every lane
  if (fused && active) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const bool fresh = (!paged || row_slot[r] == own_slot) && row_pos[r] >= begin &&
                         row_pos[r] < end;  // row_pos -1: no row
      const unsigned ballot = __ballot_sync(0xffffffffu, fresh);
      if (fresh) {
        const int x = fresh_count + __popc(ballot & ((1u << lane) - 1u));
        fresh_pos_s[warp][x] = row_pos[r];
        fresh_row_s[warp][x] = lane + 32 * r;
      }
      fresh_count += __popc(ballot);
    }
    __syncwarp();
  }
  // Where key j's K and V rows come from: cache row r >= 0, or row -1 - r of k_new / v_new when
  // this call writes key j (the cache row is not read: another block may be writing it).
  const int32_t* table = block_table_of(kv, t);
  const int block_size = static_cast<int>(kv.block_size);
  const auto key_row = [&](int j) -> int64_t {
    for (int x = 0; x < fresh_count; ++x) {
      if (fresh_pos_s[warp][x] == j) return -1 - fresh_row_s[warp][x];
    }
    return split_kv_cache_row(table, block_size, j);
  };
  // No barrier here: tiles 0 and 1 look their keys' rows up as they copy them (their copies are
  // issued before the loop's first barrier); later tiles' rows go through row_s a tile ahead.
  // q_s and the softmax state are read after the loop's first barrier.

  const int k_vecs = d / kVec;
  const int v_vecs = dv / kVec;
  const T* k_head = k_cache + g * d;
  const T* v_head = v_cache + g * dv;
  // k_new / v_new rows have the cache's layout [kv_heads, head dim] (null: never read).
  const T* k_new_head = fused ? k_new + g * d : k_head;
  const T* v_new_head = fused ? v_new + g * dv : v_head;
  const int64_t k_stride = dims.kv_heads * d;
  const int64_t v_stride = dims.kv_heads * dv;
  const auto tile_keys = [&](int i) {
    const int left_keys = end - begin - i * tile;
    return left_keys < tile ? left_keys : tile;
  };
  // Every 16-byte piece of tile i's K and V rows, issued at once (the kernel is bound by memory
  // latency at decode sizes, not bandwidth: one round trip per tile, overlapped with the math of
  // the tile before). Tile 0 goes in two parts, its cache rows before the wait and the call's
  // own rows after it (`from`).
  enum class From { kAll, kCache, kCall };
  const auto copy_tile = [&](int i, From from) {
    const int stage = i & 1;
    const int n = tile_keys(i);
    T* k_dst = stages_s + stage * tile * (d + dv);
    T* v_dst = k_dst + tile * d;
    const int64_t* rows = row_s + stage * tile;  // tiles >= 2
    const bool look_up = i < 2;
    const auto wanted = [&](int64_t r) {
      return from == From::kAll || (from == From::kCache) == (r >= 0);
    };
    // Not unrolled: a short split's tile is one pass, and the kernel's code is kept small (its
    // size showed as no_instruction stalls).
#pragma unroll 1
    for (int x = tid; x < n * k_vecs; x += kSplitKvThreads) {
      const int j = x / k_vecs;
      const int c = (x - j * k_vecs) * kVec;
      const int64_t r = look_up ? key_row(begin + i * tile + j) : rows[j];
      if (!wanted(r)) continue;
      split_kv_copy_16(k_dst + j * d + c,
                       (r >= 0 ? k_head + r * k_stride : k_new_head + (-1 - r) * k_stride) + c);
    }
#pragma unroll 1
    for (int x = tid; x < n * v_vecs; x += kSplitKvThreads) {
      const int j = x / v_vecs;
      const int c = (x - j * v_vecs) * kVec;
      const int64_t r = look_up ? key_row(begin + i * tile + j) : rows[j];
      if (!wanted(r)) continue;
      split_kv_copy_16(v_dst + j * dv + c,
                       (r >= 0 ? v_head + r * v_stride : v_new_head + (-1 - r) * v_stride) + c);
    }
  };
  if (fused && active) {
    copy_tile(0, From::kCache);
    split_kv_commit_copies();
  }

  // Everything below reads what the kernels before wrote (q, the call's K and V rows, the
  // counters) or writes what they may still read (the partials): launch_pdl, pdl.cuh. What
  // follows it reads nothing before its own pdl_wait (the o projection's GEMV or GEMM, or the flash
  // launch of the same call's chunks, attention_takes_row_kinds): pdl_wait_then_launch.
  pdl_wait_then_launch(early);
  // q of the block's heads (zeros past nh): one 16-byte load per thread where aligned. (Tile 0's
  // own rows are copied after it, so the block holding key p waits for q, then for that row.)
  if (reinterpret_cast<uintptr_t>(q) % 16 == 0) {
    for (int i = tid * kVec; i < kHeads * d; i += kSplitKvThreads * kVec) {
      const int hh = i / d;
      const int c = i - hh * d;
      float* dst = q_s + i;
      if (hh < nh) {
        const uint4 raw =
            __ldg(reinterpret_cast<const uint4*>(q + (t * dims.heads + h0 + hh) * d + c));
        const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
        for (int x = 0; x < kVec; ++x) dst[x] = to_float(e[x]);
      } else {
#pragma unroll
        for (int x = 0; x < kVec; ++x) dst[x] = 0.0f;
      }
    }
  } else {
#pragma unroll 1
    for (int i = tid; i < kHeads * d; i += kSplitKvThreads) {
      const int hh = i / d;
      q_s[i] = hh < nh ? to_float(q[(t * dims.heads + h0 + hh) * d + i - hh * d]) : 0.0f;
    }
  }
  if (!valid) {  // a NaN row, written by split 0
    if (split == 0) {
      const T nan = from_float<T>(__int_as_float(0x7fc00000));
#pragma unroll 1
      for (int i = tid; i < nh * dv; i += kSplitKvThreads) {
        out[(t * dims.heads + h0) * dv + i] = nan;
      }
    }
    return;
  }
  if (!active) return;

  // P·V layout: thread = 4 consecutive output elements (head, dims) of up to kOutChunks chunks;
  // each chunk sums over every key of the tile, so no reduction across threads is needed.
  const int dv4 = dv / 4;
  float acc[kOutChunks][4];
#pragma unroll
  for (int u = 0; u < kOutChunks; ++u) {
#pragma unroll
    for (int x = 0; x < 4; ++x) acc[u][x] = 0.0f;
  }
  // Score layout: `lanes` consecutive threads (a power of two <= 32) read one key's K row.
  const int lanes = kSplitKvThreads >> tile_shift;
  const int lanes_shift = __ffs(lanes) - 1;

  // Tile 0's rest (all of it when not fused): the loop's first wait covers both of its groups.
  copy_tile(0, fused ? From::kCall : From::kAll);
  split_kv_commit_copies();
  for (int i = 0; i < tiles; ++i) {
    const int stage = i & 1;
    const int n = tile_keys(i);
    // Tile i + 2's cache rows go to this stage's row_s (read when tile i was copied) after the
    // math below, so that a paged table's load has the whole tile to arrive.
    int64_t ahead_row = 0;
    const int ahead_key = begin + (i + 2) * tile + tid;
    if (tid < tile && ahead_key < end) ahead_row = key_row(ahead_key);
    if (i + 1 < tiles) copy_tile(i + 1, From::kAll);
    split_kv_commit_copies();  // possibly empty: the wait below then always means tile i
    split_kv_wait_all_but_newest();
    __syncthreads();

    const T* k_tile = stages_s + stage * tile * (d + dv);
    const T* v_tile = k_tile + tile * d;
    {
      // Scores: the key's lanes split its row in 16-byte pieces, dot each with every head's q
      // (shared memory) and sum by shuffles (xor offsets below `lanes` stay in the key's group).
      const int j = tid >> lanes_shift;
      const int sub = tid & (lanes - 1);
      float dot[kHeads];
#pragma unroll
      for (int hh = 0; hh < kHeads; ++hh) dot[hh] = 0.0f;
      if (j < n) {
        for (int c = sub * kVec; c < d; c += lanes * kVec) {
          const uint4 raw = *reinterpret_cast<const uint4*>(k_tile + j * d + c);
          const T* e = reinterpret_cast<const T*>(&raw);
          float k_f[kVec];
#pragma unroll
          for (int x = 0; x < kVec; ++x) k_f[x] = to_float(e[x]);
#pragma unroll
          for (int hh = 0; hh < kHeads; ++hh) {
            const float* q_h = q_s + hh * d + c;
#pragma unroll
            for (int x = 0; x < kVec; x += 4) {
              const float4 qv = *reinterpret_cast<const float4*>(q_h + x);
              dot[hh] += qv.x * k_f[x] + qv.y * k_f[x + 1] + qv.z * k_f[x + 2] + qv.w * k_f[x + 3];
            }
          }
        }
      }
      // The sum over the key's lanes, a transposed butterfly: at each offset a lane keeps half
      // of the heads it holds and sends the other half to its partner (lane ^ off), which
      // keeps the opposite half, until one head is left (then plain xor sums) or the offsets
      // run out. kHeads - 1 shuffles and a few more instead of kHeads per offset (16 lanes,
      // 8 heads: 8 instead of 32). dot[0, held) are then heads head0 + x, the same in the
      // `group` lanes of sub's aligned group, whose first lane writes them.
      int off = lanes / 2, head0 = 0, held = kHeads, group = lanes;
#pragma unroll
      for (int half = kHeads / 2; half >= 1; half /= 2) {
        if (off == 0) break;
        const bool upper = (sub & off) != 0;
#pragma unroll
        for (int x = 0; x < half; ++x) {
          const float send = upper ? dot[x] : dot[x + half];
          const float keep = upper ? dot[x + half] : dot[x];
          dot[x] = keep + __shfl_xor_sync(0xffffffffu, send, off);
        }
        if (upper) head0 += half;
        held = half;
        group = off;
        off /= 2;
      }
      for (; off > 0; off /= 2) dot[0] += __shfl_xor_sync(0xffffffffu, dot[0], off);
      if ((sub & (group - 1)) == 0 && j < n) {
#pragma unroll
        for (int x = 0; x < kHeads; ++x) {
          if (x < held) score_s[(head0 + x) * tile + j] = dot[x] * dims.scale;
        }
      }
    }
    __syncthreads();

    // Online softmax over the tile's n keys: one warp per head.
    for (int hh = warp; hh < nh; hh += kSplitKvWarps) {
      float* s = score_s + hh * tile;
      float tile_max = -INFINITY;
      for (int j = lane; j < n; j += 32) tile_max = fmaxf(tile_max, s[j]);
      tile_max = warp_max(tile_max);
      const float m_old = max_s[hh];
      const float m_new = fmaxf(m_old, tile_max);  // finite: the tile has a key
      float sum = 0.0f;
      for (int j = lane; j < n; j += 32) {
        const float w = expf(s[j] - m_new);
        s[j] = w;
        sum += w;
      }
      sum = warp_sum(sum);
      __syncwarp();  // every lane has read max_s[hh] (m_old) before lane 0 overwrites it
      if (lane == 0) {
        const float rescale = expf(m_old - m_new);  // 0 on the first tile (m_old = -inf)
        rescale_s[hh] = rescale;
        denom_s[hh] = denom_s[hh] * rescale + sum;
        max_s[hh] = m_new;
      }
    }
    __syncthreads();

#pragma unroll
    for (int u = 0; u < kOutChunks; ++u) {
      const int o = tid + u * kSplitKvThreads;
      if (o < nh * dv4) {
        const int hh = o / dv4;
        const float* w = score_s + hh * tile;
        const T* v = v_tile + (o - hh * dv4) * 4;
        const float rescale = rescale_s[hh];
#pragma unroll
        for (int x = 0; x < 4; ++x) acc[u][x] *= rescale;
#pragma unroll 4
        for (int j = 0; j < n; ++j) {
          float v_f[4];
          load4(v + j * dv, v_f);
          const float w_j = w[j];
#pragma unroll
          for (int x = 0; x < 4; ++x) acc[u][x] += w_j * v_f[x];
        }
      }
    }
    if (tid < tile) row_s[stage * tile + tid] = ahead_row;
    // The next iteration copies tile i + 2 into this stage (and reads row_s). Nothing after the
    // last tile needs it: the fused write reads that tile's stage (read-only, landed before the
    // first barrier above), the partials are each thread's own registers and max_s / denom_s
    // were last written before the barrier above.
    if (i + 1 < tiles) __syncthreads();
  }

  // The fused write: the block whose split ends at key p (its last tile, still in its stage) and
  // serves head tile 0 stores (row t, KV head g) into the cache, unless p's block is outside the
  // pool. No block of this launch reads that cache row (key_row); later kernels wait for this one.
  if (fused && end == p + 1 && head_tile == 0) {
    const int32_t block = table != nullptr ? table[p / block_size] : 0;
    if (table == nullptr || (block >= 0 && block < kv.num_blocks)) {
      const int64_t row = split_kv_cache_row(table, block_size, p);
      const int j = end - 1 - begin - (tiles - 1) * tile;
      const T* k_src = stages_s + ((tiles - 1) & 1) * tile * (d + dv) + j * d;
      const T* v_src = stages_s + ((tiles - 1) & 1) * tile * (d + dv) + tile * d + j * dv;
      for (int x = tid; x < k_vecs + v_vecs; x += kSplitKvThreads) {
        if (x < k_vecs) {
          *reinterpret_cast<uint4*>(k_cache + row * k_stride + g * d + x * kVec) =
              *reinterpret_cast<const uint4*>(k_src + x * kVec);
        } else {
          const int c = (x - k_vecs) * kVec;
          *reinterpret_cast<uint4*>(v_cache + row * v_stride + g * dv + c) =
              *reinterpret_cast<const uint4*>(v_src + c);
        }
      }
    }
  }

  // This split's partials; head h0 + hh's slot is slot0 + hh * splits.
  const int64_t slot0 = (t * dims.heads + h0) * splits + split;
#pragma unroll
  for (int u = 0; u < kOutChunks; ++u) {
    const int o = tid + u * kSplitKvThreads;
    if (o < nh * dv4) {
      const int hh = o / dv4;
      *reinterpret_cast<float4*>(part_acc + (slot0 + hh * splits) * dv + (o - hh * dv4) * 4) =
          make_float4(acc[u][0], acc[u][1], acc[u][2], acc[u][3]);
    }
  }
  if (tid < nh) {
    *reinterpret_cast<float2*>(part_stats + (slot0 + tid * splits) * 2) =
        make_float2(max_s[tid], denom_s[tid]);
  }

  // The last of the row's `used` blocks to arrive combines (instead of a second kernel launch).
  // The barrier orders every thread's partials before thread 0's arrival, whose acq_rel atomic
  // releases them (cumulatively) to the other blocks and, in the last block, acquires theirs; the
  // barrier after it orders every thread's reads after that (one fence-like operation per block
  // instead of two fences by each of its 256 threads: the membar stalls Nsight Compute showed).
  __syncthreads();
  if (tid == 0) {
    unsigned* counter = counters + static_cast<int64_t>(blockIdx.z) * gridDim.y + blockIdx.y;
    const bool last = split_kv_arrive(counter) + 1 == static_cast<unsigned>(used);
    if (last) *counter = 0;  // every block of this launch has arrived: ready for the next
    last_s = last;
  }
  __syncthreads();
  if (!last_s) return;

  // The merge. Weights first: warp hh reads head hh's (max, denominator) of every split (lanes
  // split the splits, .cg loads: written by other SMs), M = the max over the splits and the sink,
  // L = Σ l_s exp(m_s - M) + exp(sink - M) (the sink adds to the denominator only), and split s's
  // weight exp(m_s - M) / L goes to shared memory. Then each thread sums its chunks' partials
  // times the weights (kSplitKvCombineBatch splits' 16-byte loads in flight at a time): one exp
  // per (head, split) instead of one per (thread, split), and no per-thread chain of rescales.
  static_assert(kSplitKvMaxSplits <= 64, "a lane reads the stats of two splits at most");
  static_assert(kHeads <= kSplitKvWarps, "a warp per head computes the merge weights");
  const int64_t head_slot0 = slot0 - split;  // split 0 of head h0
  // Splits [s0, s0 + kSplitKvCombineBatch) of output chunk o's partials (past `used`: zeros).
  const auto load_partials = [&](int o, int s0, float4(&part)[kSplitKvCombineBatch]) {
    const int hh = o / dv4;
    const float* src = part_acc + (head_slot0 + hh * splits) * dv + (o - hh * dv4) * 4;
#pragma unroll
    for (int b = 0; b < kSplitKvCombineBatch; ++b) {
      part[b] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      if (s0 + b < used) part[b] = __ldcg(reinterpret_cast<const float4*>(src + (s0 + b) * dv));
    }
  };
  // The first chunk's first batch is loaded now, in flight with the stats (one round trip for
  // both rather than the weights' and then the partials').
  float4 part[kSplitKvCombineBatch];
  if (tid < nh * dv4) load_partials(tid, 0, part);
  if (warp < nh) {
    const int64_t slot = head_slot0 + warp * splits;
    float m_s[2], l_s[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int s = lane + 32 * r;
      float2 stats = make_float2(-INFINITY, 0.0f);  // past `used`: weight 0
      if (s < used) stats = __ldcg(reinterpret_cast<const float2*>(part_stats + (slot + s) * 2));
      m_s[r] = stats.x;
      l_s[r] = stats.y;
    }
    const float sink = sinks != nullptr ? to_float(sinks[h0 + warp]) : -INFINITY;
    // Finite: every used split has a key.
    const float m = fmaxf(warp_max(fmaxf(m_s[0], m_s[1])), sink);
    float w[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) w[r] = expf(m_s[r] - m);  // 0 past `used` (-inf)
    float l = warp_sum(l_s[0] * w[0] + l_s[1] * w[1]);
    if (sinks != nullptr) l += expf(sink - m);
    const float inv_l = 1.0f / l;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int s = lane + 32 * r;
      if (s < used) merge_w_s[warp][s] = w[r] * inv_l;
    }
  }
  __syncthreads();
#pragma unroll 1  // no register array is indexed by u here; the batch below is unrolled
  for (int u = 0; u < kOutChunks; ++u) {
    const int o = tid + u * kSplitKvThreads;
    if (o >= nh * dv4) break;
    const int hh = o / dv4;
    const int e0 = (o - hh * dv4) * 4;
    const float* w = merge_w_s[hh];
    float a[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int s0 = 0; s0 < used; s0 += kSplitKvCombineBatch) {
      if (u > 0 || s0 > 0) load_partials(o, s0, part);
#pragma unroll
      for (int b = 0; b < kSplitKvCombineBatch; ++b) {
        const float w_b = s0 + b < used ? w[s0 + b] : 0.0f;
        a[0] += part[b].x * w_b;
        a[1] += part[b].y * w_b;
        a[2] += part[b].z * w_b;
        a[3] += part[b].w * w_b;
      }
    }
    store4(out + (t * dims.heads + h0 + hh) * dv + e0, a);
  }
}

template <typename T, int kHeads>
void launch_split_kv_heads(const AttentionDims& dims, const AttentionArgs& a, int64_t splits,
                           int64_t tile, float* part_acc, float* part_stats, cudaStream_t stream) {
  const int64_t head_tiles = split_kv_head_tiles(dims);
  const dim3 grid(static_cast<unsigned>(splits), static_cast<unsigned>(dims.kv_heads * head_tiles),
                  static_cast<unsigned>(a.tokens));
  MG_ASSERT(a.max_seq_len <= INT32_MAX && (a.kv.block_tables == nullptr ||
                                           a.kv.max_blocks_per_seq * a.kv.block_size <= INT32_MAX),
            "attention: split-KV positions beyond int32 ({} per sequence)", a.max_seq_len);
  const size_t shared = split_kv_shared_bytes(dims, sizeof(T), tile);
  const auto kernel = attention_split_kv_kernel<T, kHeads>;
  opt_in_dynamic_shared(attention_split_kv_kernel<T, kHeads>, shared);
  // The call's K and V rows are written inside (attention_fuses_kv_write) or already were.
  launch_pdl(kernel, grid, dim3(kSplitKvThreads), shared, stream, dims, static_cast<const T*>(a.q),
             a.positions, static_cast<const T*>(a.k), static_cast<const T*>(a.v),
             static_cast<T*>(a.k_cache), static_cast<T*>(a.v_cache), static_cast<const T*>(a.sinks),
             static_cast<T*>(a.out), a.max_seq_len, a.kv, static_cast<int>(splits),
             static_cast<int>(dims.heads / dims.kv_heads), static_cast<int>(head_tiles),
             static_cast<int>(tile), part_acc, part_stats, a.split_counters,
             pdl_early_dependents());
}

template <typename T>
void launch_attention_split_kv(const AttentionDims& dims, const AttentionArgs& a,
                               cudaStream_t stream) {
  MG_ASSERT(split_kv_supports(dims, sizeof(T)) && split_kv_pointers_aligned(a),
            "attention: split-KV needs 16-byte K/V rows and aligned buffers, head_dim {} "
            "v_head_dim {} of {} bytes (caches at {} and {}, out {}, workspace {})",
            dims.head_dim, dims.v_head_dim, sizeof(T), a.k_cache, a.v_cache, a.out, a.workspace);
  MG_ASSERT(a.k == nullptr || (a.tokens <= kSplitKvFusedWriteMaxTokens && split_kv_rows_aligned(a)),
            "attention: split-KV writing the KV cache for {} rows (at most {}), k at {}, v at {}",
            a.tokens, kSplitKvFusedWriteMaxTokens, a.k, a.v);
  MG_ASSERT(a.tokens <= 65535, "attention: split-KV launch of {} rows", a.tokens);
  const int64_t splits = a.splits > 0 ? std::min(a.splits, kSplitKvMaxSplits)
                                      : split_kv_splits(dims, a.tokens, a.max_seq_len, a.sm_count);
  const int64_t tile = a.tile_keys > 0 ? a.tile_keys : split_kv_tile_keys(dims, sizeof(T));
  MG_ASSERT(tile >= kSplitKvMinTileKeys && tile <= kSplitKvMaxTileKeys &&
                (tile & (tile - 1)) == 0 &&
                split_kv_shared_bytes(dims, sizeof(T), tile) <= kSplitKvMaxSharedBytes,
            "attention: split-KV tile of {} keys ({} bytes of shared memory)", tile,
            split_kv_shared_bytes(dims, sizeof(T), tile));
  const size_t need = split_kv_workspace_bytes(dims, a.tokens, splits);
  MG_ASSERT(a.workspace != nullptr && a.workspace_bytes >= need,
            "attention: split-KV workspace of {} bytes, need {}", a.workspace_bytes, need);
  MG_ASSERT(a.split_counters != nullptr &&
                a.split_counter_count >= split_kv_counter_count(dims, a.tokens),
            "attention: split-KV with {} counters, need {}", a.split_counter_count,
            split_kv_counter_count(dims, a.tokens));
  float* part_acc = static_cast<float*>(a.workspace);
  float* part_stats = part_acc + a.tokens * dims.heads * splits * dims.v_head_dim;
  switch (split_kv_block_heads(dims)) {
    case 1:
      return launch_split_kv_heads<T, 1>(dims, a, splits, tile, part_acc, part_stats, stream);
    case 2:
      return launch_split_kv_heads<T, 2>(dims, a, splits, tile, part_acc, part_stats, stream);
    case 4:
      return launch_split_kv_heads<T, 4>(dims, a, splits, tile, part_acc, part_stats, stream);
    default:
      return launch_split_kv_heads<T, 8>(dims, a, splits, tile, part_acc, part_stats, stream);
  }
}

template <typename T>
void launch_attention(const AttentionDims& dims, const AttentionArgs& args, cudaStream_t stream) {
  if (args.tokens <= 0) return;
  const int64_t widest = dims.head_dim > dims.v_head_dim ? dims.head_dim : dims.v_head_dim;
  MG_ASSERT(widest <= kAttentionMaxHeadDim, "attention: head dim {} > {}", widest,
            kAttentionMaxHeadDim);
  MG_ASSERT((args.k == nullptr) == (args.v == nullptr), "attention: k {} but v {} to write", args.k,
            args.v);
  if (attention_fuses_kv_write(dims, sizeof(T), args)) {
    return launch_attention_split_kv<T>(dims, args, stream);
  }
  // Every other launch: the KV-cache write first (its own kernel), then the attention kernel
  // reads every key from the cache.
  AttentionArgs a = args;
  if (a.k != nullptr) {
    KvCacheWriteArgs write;
    write.k = a.k;
    write.v = a.v;
    write.positions = a.positions;
    write.k_cache = a.k_cache;
    write.v_cache = a.v_cache;
    write.tokens = a.tokens;
    write.max_seq_len = a.max_seq_len;
    write.kv = a.kv;
    launch_kv_cache_write<T>(dims, write, stream);
    a.k = a.v = nullptr;
  }
  if (attention_takes_row_kinds(dims, sizeof(T), a)) {
    const int64_t d = a.kv.decode_rows;
    launch_attention_split_kv<T>(dims, attention_rows(dims, sizeof(T), a, 0, d, 0), stream);
    return launch_attention_flash<T>(
        dims, attention_rows(dims, sizeof(T), a, d, a.tokens, a.kv.chunk_flash_passes), stream);
  }
  switch (attention_path_taken(dims, sizeof(T), a)) {
    case AttentionPath::kSplitKv:
      return launch_attention_split_kv<T>(dims, a, stream);
    case AttentionPath::kFlashPrefill:
      return launch_attention_flash<T>(dims, a, stream);
    case AttentionPath::kAuto:  // resolved by attention_path_taken
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
