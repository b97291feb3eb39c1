// The flash prefill attention kernel (FlashAttention-2 style, tensor cores): included by
// attention_cuda.cuh; the host-side rule that picks it is flash_prefill_unsupported in
// attention_cuda.h.
//
// Why: the per-query kernel (attention_kernel) walks a query's keys one at a time per warp
// (dependent loads and shuffle reductions, no tensor cores), so a prompt of T tokens costs
// O(T^2) latency chains. Here a block owns kFlashRows = 64 query rows of one head (4 warps × 16
// rows) and walks the keys in tiles of kFlashKeys = 64:
//  - Q (64 rows) and the tiles' K and V rows are copied to shared memory with cp.async; the next
//    tile's copy is issued before this tile's math (two stages).
//  - S = Q·K^T and O += P·V are mma.sync m16n8k16 (BF16/F16 in, F32 accumulate); the online
//    softmax (running max m and denominator l per row, base 2: scores are scaled by
//    scale·log2(e)) lives in registers. P is rounded to T for the P·V product.
//  - The block's key range is [min first visible, max position] over its rows (first visible:
//    sliding window, chunk; attention.h); tiles outside it are never read (causal: the tiles past
//    the diagonal, window: the tiles before it). Each score is masked to its row's own range
//    [first, p] unless the whole tile lies inside every row's range (then no mask is needed).
//    Positions need not be consecutive or start at 0 (a prompt chunk after earlier chunks).
//  - A sink (GPT-OSS) adds exp(sink - max) to the denominator at the end, nothing to O.
//  - A row whose position lies outside the cache gets NaN, as in the other kernels.
// Grid: x = head (the heads of one KV group are neighbours, so their blocks share K/V in L2),
// y = query tile, heaviest (latest) tiles first.
// Paged caches (kv_batch.h; the Engine's batches mix sequences): the block makes one pass over
// the keys per distinct sequence slot among its rows, reading that slot's keys through its block
// table, each row attending only in its own slot's pass. A prompt chunk's 64 rows are usually one
// sequence (one pass); a tile of decode rows of many sequences costs one pass each, so the auto
// rule takes a paged batch only when the host's count of passes says its tiles are mostly one
// sequence each (KvBatch::flash_passes, flash_prefill_chosen).
// Other shapes keep the per-query kernel (flash_prefill_unsupported says why).
//
// mma.sync m16n8k16 fragment layouts (PTX ISA, "Matrix Fragments for mma.m16n8k16"), with
// gid = lane / 4 and tig = lane % 4; each 32-bit register holds two 16-bit elements, the lower
// column (or k) index in the low half:
//   A (16×16, row-major):  a0 = (row gid,     k 2tig, 2tig+1)   a1 = (row gid + 8, k 2tig, 2tig+1)
//                          a2 = (row gid,     k 2tig+8, +9)     a3 = (row gid + 8, k 2tig+8, +9)
//   B (16×8, "col"):       b0 = (k 2tig, 2tig+1; col gid)       b1 = (k 2tig+8, +9; col gid)
//   C (16×8, F32):         c0, c1 = (row gid, col 2tig, 2tig+1) c2, c3 = (row gid + 8, same cols)
// S = Q·K^T: A = Q rows (k = head dim), B[k][n] = K[key n][dim k], so b0/b1 are two consecutive
// elements of one K row: plain 32-bit shared loads. O += P·V: A = P, whose C fragments of two
// neighbouring 8-key tiles are exactly the A fragment of their 16 keys (c0c1 of tile 2kk → a0,
// c2c3 → a1, tile 2kk+1's → a2, a3); B[k][n] = V[key k][dim n] holds two elements of one column,
// loaded by ldmatrix.trans (below).
#pragma once

#include <climits>
#include <type_traits>

#include "framework/device/cuda/cuda_check.h"
#include "framework/device/cuda/cuda_utils.cuh"
#include "framework/device/cuda/dynamic_shared.cuh"
#include "framework/device/cuda/pdl.cuh"
#include "ops/nn/attention/attention_cuda.h"

namespace mg::cuda {

constexpr int kFlashThreads = 128;  // 4 warps × 16 query rows = kFlashRows
// Shared-memory rows are padded by 8 elements (16 bytes): a row of 64 or 128 elements is then
// 36 or 68 words, 4 banks apart, so the 8 rows one ldmatrix phase or one fragment load touches
// fall on distinct banks.
constexpr int kFlashPad = 8;

// Dynamic shared memory of a block: Q, then two stages of K, then two stages of V.
constexpr size_t flash_shared_bytes(int head_dim, size_t element_bytes) {
  return static_cast<size_t>((kFlashRows + 4 * kFlashKeys) * (head_dim + kFlashPad)) *
         element_bytes;
}

__device__ __forceinline__ uint32_t flash_smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes global → shared (cp.async .cg, sm_80+); zero-filled when !valid (no global read).
__device__ __forceinline__ void flash_copy_16(void* dst, const void* src, bool valid) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(flash_smem_u32(dst)),
               "l"(src), "r"(src_bytes));
#else
  *static_cast<uint4*>(dst) = valid ? *static_cast<const uint4*>(src) : make_uint4(0, 0, 0, 0);
#endif
}
__device__ __forceinline__ void flash_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::);
#endif
}
// Waits for every committed group but the newest.
__device__ __forceinline__ void flash_wait_all_but_newest() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group 1;\n" ::);
#endif
}

// Four 8×8 16-bit matrices, transposed: lanes 8i..8i+7 give the addresses of matrix i's 8 rows
// (16 bytes each); register i of lane (gid, tig) receives matrix i's elements [row 2tig][col gid]
// and [row 2tig + 1][col gid], i.e. a B fragment half when the rows are keys and the columns dims.
__device__ __forceinline__ void flash_ldmatrix_x4_trans(uint32_t (&r)[4], const void* row) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(flash_smem_u32(row)));
#else
  r[0] = r[1] = r[2] = r[3] = 0;
#endif
}

// d += a·b, m16n8k16, F32 accumulators (layouts in the header comment).
template <typename T>
__device__ __forceinline__ void flash_mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                          uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
#endif
}

// Two floats as one register of two T (x in the low half).
template <typename T>
__device__ __forceinline__ uint32_t flash_pack(float x, float y) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(x, y);
    return *reinterpret_cast<const uint32_t*>(&v);
  } else {
    const __half2 v = __floats2half2_rn(x, y);
    return *reinterpret_cast<const uint32_t*>(&v);
  }
}

// Query tile blockIdx.y (from the last), head blockIdx.x. tokens and max_seq_len fit int32
// (flash_prefill_unsupported). Dynamic shared memory: flash_shared_bytes(kD, sizeof(T)).
template <typename T, int kD>
__global__ void __launch_bounds__(kFlashThreads)
    attention_flash_prefill_kernel(AttentionDims dims, const T* q, const int32_t* positions,
                                   const T* k_cache, const T* v_cache, const T* sinks, T* out,
                                   int tokens, int max_seq_len, KvBatch kv) {
  static_assert(kD % 16 == 0, "head dim in whole 16-element mma steps");
  constexpr int kRows = static_cast<int>(kFlashRows);
  constexpr int kKeys = static_cast<int>(kFlashKeys);
  static_assert(kRows == 16 * (kFlashThreads / 32), "one warp per 16 query rows");
  static_assert(kKeys == 64, "the score fragments below are 8 tiles of 8 keys");
  constexpr int kStride = kD + kFlashPad;  // elements per shared row
  constexpr int kVecs = kD / 8;            // 16-byte pieces per row
  constexpr float kLog2e = 1.4426950408889634f;
  extern __shared__ __align__(16) unsigned char flash_shared[];
  T* q_s = reinterpret_cast<T*>(flash_shared);  // [kRows][kStride]
  T* k_s = q_s + kRows * kStride;               // [2][kKeys][kStride]
  T* v_s = k_s + 2 * kKeys * kStride;           // [2][kKeys][kStride]
  __shared__ int first_s[kRows];  // row r sees keys [first_s[r], last_s[r]]; empty when last < 0
  __shared__ int last_s[kRows];
  __shared__ int slot_s[kRows];  // row r's sequence slot (paged), 0 (contiguous), -1: no keys
  // One pass per sequence slot of the block's rows: the pass's slot, its rows' key range
  // [min first, max last], [max first, min last] (the keys every row of the pass sees: a tile
  // inside it needs no mask when the pass has every valid row of the block), and its row count.
  __shared__ int pass_slot_s, min_first_s, max_last_s, max_first_s, min_last_s, pass_rows_s;
  __shared__ int valid_rows_s;

  pdl_wait();  // q, positions and the cache come from before (launch_pdl, pdl.cuh)
  pdl_launch_dependents();

  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int gid = lane >> 2;
  const int tig = lane & 3;
  const int h = static_cast<int>(blockIdx.x);
  const int t0 = static_cast<int>(gridDim.y - 1 - blockIdx.y) * kRows;
  const int g = h / static_cast<int>(dims.heads / dims.kv_heads);

  if (tid == 0) valid_rows_s = 0;
  __syncthreads();
  if (tid < kRows) {
    int first = 0, last = -1;  // a padding row (past tokens) or a position outside the cache
    int slot = -1;
    const int t = t0 + tid;
    if (t < tokens) {
      const int p = positions[t];
      if (p >= 0 && p < max_seq_len) {
        // First visible key: window and chunk (attention.h; first_visible in attention_cuda.cuh).
        if (dims.sliding_window > 0 && p - dims.sliding_window + 1 > first) {
          first = static_cast<int>(p - dims.sliding_window + 1);
        }
        if (dims.chunk_size > 0 && p - p % dims.chunk_size > first) {
          first = static_cast<int>(p - p % dims.chunk_size);
        }
        last = p;
        slot = kv.block_tables != nullptr && kv.row_slots != nullptr ? kv.row_slots[t] : 0;
        atomicAdd(&valid_rows_s, 1);
      }
    }
    first_s[tid] = first;
    last_s[tid] = last;
    slot_s[tid] = slot;
  }

  const int64_t q_stride = dims.heads * kD;
  const int64_t kv_stride = dims.kv_heads * kD;
  const T* q_head = q + static_cast<int64_t>(h) * kD;
  const T* k_head = k_cache + static_cast<int64_t>(g) * kD;
  const T* v_head = v_cache + static_cast<int64_t>(g) * kD;

  // This thread's two rows of the warp's 16: rr = 0 → row gid, rr = 1 → row gid + 8.
  const int row0 = warp * 16 + gid;
  const float scale_log2 = dims.scale * kLog2e;
  uint32_t q_frag[kD / 16][4];  // A fragments of the warp's 16 rows, one per 16 dims
  bool q_loaded = false;
  float o[kD / 8][4];                   // C fragments of O: 8 dims per tile
  float m[2] = {-INFINITY, -INFINITY};  // running max (base-2 units) of rows gid, gid + 8
  float l[2] = {0.0f, 0.0f};            // this thread's part of the running Σ 2^(x - m)
#pragma unroll
  for (int dn = 0; dn < kD / 8; ++dn) {
#pragma unroll
    for (int e = 0; e < 4; ++e) o[dn][e] = 0.0f;
  }

  // One pass over the keys per sequence slot among the block's rows, in increasing slot order (a
  // contiguous cache, or a paged tile of one sequence: one pass). A row takes part in its own
  // slot's pass only; in the others all its scores are masked, which leaves its (m, l, O) as
  // they were.
  for (int done_slot = -1;;) {
    __syncthreads();  // every thread has read the previous pass's shared values
    if (tid == 0) {
      pass_slot_s = INT_MAX;
      min_first_s = INT_MAX;
      max_last_s = -1;
      max_first_s = -1;
      min_last_s = INT_MAX;
      pass_rows_s = 0;
    }
    __syncthreads();
    if (tid < kRows && slot_s[tid] > done_slot) atomicMin(&pass_slot_s, slot_s[tid]);
    __syncthreads();
    const int slot = pass_slot_s;
    if (slot == INT_MAX) break;  // uniform: every row's slot is done
    if (tid < kRows && slot_s[tid] == slot) {
      atomicMin(&min_first_s, first_s[tid]);
      atomicMax(&max_last_s, last_s[tid]);
      atomicMax(&max_first_s, first_s[tid]);
      atomicMin(&min_last_s, last_s[tid]);
      atomicAdd(&pass_rows_s, 1);
    }
    __syncthreads();
    done_slot = slot;
    const int key_begin = min_first_s;
    const int key_last = max_last_s;  // >= key_begin: the pass has a valid row
    const int all_first = max_first_s;
    const int all_last = min_last_s;
    const bool every_row = pass_rows_s == valid_rows_s;
    const int tiles = (key_last - key_begin) / kKeys + 1;
    // This pass's ranges of the thread's two rows (empty for rows of other slots).
    int row_first[2], row_last[2];
#pragma unroll
    for (int rr = 0; rr < 2; ++rr) {
      const bool mine = slot_s[row0 + 8 * rr] == slot;
      row_first[rr] = mine ? first_s[row0 + 8 * rr] : 0;
      row_last[rr] = mine ? last_s[row0 + 8 * rr] : -1;
    }
    // The slot's block table (paged), or null; block_size fits int32 (max_seq_len does).
    const int block_size = static_cast<int>(kv.block_size);
    const int32_t* table =
        kv.block_tables != nullptr
            ? kv.block_tables + static_cast<int64_t>(slot) * kv.max_blocks_per_seq
            : nullptr;

    // Tile i's K and V rows (keys key_begin + i·kKeys + r) into stage i & 1; keys past key_last
    // are zero-filled (their scores are masked, and zeros keep 0·V finite).
    const auto copy_tile = [&](int i) {
      const int j0 = key_begin + i * kKeys;
      T* k_dst = k_s + (i & 1) * kKeys * kStride;
      T* v_dst = v_s + (i & 1) * kKeys * kStride;
      for (int x = tid; x < kKeys * kVecs; x += kFlashThreads) {
        const int r = x / kVecs;
        const int c = (x - r * kVecs) * 8;
        const int j = j0 + r;
        const bool valid = j <= key_last;
        int64_t row = j;  // the cache row of key j (kv_batch.h)
        if (valid && table != nullptr) {
          row = static_cast<int64_t>(table[j / block_size]) * block_size + j % block_size;
        }
        const int64_t offset = valid ? row * kv_stride + c : 0;
        flash_copy_16(k_dst + r * kStride + c, k_head + offset, valid);
        flash_copy_16(v_dst + r * kStride + c, v_head + offset, valid);
      }
    };

    if (!q_loaded) {
      // Q rows past `tokens` are zero-filled (their results are never written).
      for (int x = tid; x < kRows * kVecs; x += kFlashThreads) {
        const int r = x / kVecs;
        const int c = (x - r * kVecs) * 8;
        const bool valid = t0 + r < tokens;
        const int64_t offset = valid ? static_cast<int64_t>(t0 + r) * q_stride + c : 0;
        flash_copy_16(q_s + r * kStride + c, q_head + offset, valid);
      }
    }
    copy_tile(0);
    flash_commit();  // Q (first pass) and tile 0

    for (int i = 0; i < tiles; ++i) {
      if (i + 1 < tiles) copy_tile(i + 1);
      flash_commit();  // possibly empty: the wait below then always means tile i (and Q)
      flash_wait_all_but_newest();
      __syncthreads();

      if (!q_loaded) {
        q_loaded = true;
        const T* q_row = q_s + row0 * kStride + 2 * tig;
#pragma unroll
        for (int ks = 0; ks < kD / 16; ++ks) {
          q_frag[ks][0] = *reinterpret_cast<const uint32_t*>(q_row + ks * 16);
          q_frag[ks][1] = *reinterpret_cast<const uint32_t*>(q_row + 8 * kStride + ks * 16);
          q_frag[ks][2] = *reinterpret_cast<const uint32_t*>(q_row + ks * 16 + 8);
          q_frag[ks][3] = *reinterpret_cast<const uint32_t*>(q_row + 8 * kStride + ks * 16 + 8);
        }
      }
      const T* k_tile = k_s + (i & 1) * kKeys * kStride;
      const T* v_tile = v_s + (i & 1) * kKeys * kStride;
      const int j0 = key_begin + i * kKeys;

      // S = Q·K^T: s[nt] is the C fragment of keys j0 + 8nt .. j0 + 8nt + 7.
      float s[kKeys / 8][4];
#pragma unroll
      for (int nt = 0; nt < kKeys / 8; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) s[nt][e] = 0.0f;
        const T* k_row = k_tile + (nt * 8 + gid) * kStride + 2 * tig;  // b: key 8nt + gid
#pragma unroll
        for (int ks = 0; ks < kD / 16; ++ks) {
          flash_mma<T>(s[nt], q_frag[ks], *reinterpret_cast<const uint32_t*>(k_row + ks * 16),
                       *reinterpret_cast<const uint32_t*>(k_row + ks * 16 + 8));
        }
      }

      // Scale to base 2 and mask: element e of s[nt] is row gid + 8·(e / 2), key j0 + 8nt + 2tig
      // + e % 2. A tile inside every row's range [all_first, all_last] needs no mask (this also
      // means it is full: all_last <= key_last).
      const bool no_mask = every_row && j0 >= all_first && j0 + kKeys - 1 <= all_last;
#pragma unroll
      for (int nt = 0; nt < kKeys / 8; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int j = j0 + nt * 8 + 2 * tig + (e & 1);
          const int rr = e >> 1;
          const bool visible = no_mask || (j >= row_first[rr] && j <= row_last[rr]);
          s[nt][e] = visible ? s[nt][e] * scale_log2 : -INFINITY;
        }
      }

      // Online softmax per row: the tile's max over the row's 4 lanes (tig), rescale of the old
      // sum and O, P = 2^(x - m).
#pragma unroll
      for (int rr = 0; rr < 2; ++rr) {
        float tile_max = -INFINITY;
#pragma unroll
        for (int nt = 0; nt < kKeys / 8; ++nt) {
          tile_max = fmaxf(tile_max, fmaxf(s[nt][2 * rr], s[nt][2 * rr + 1]));
        }
        tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
        tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 2));
        const float m_new = fmaxf(m[rr], tile_max);
        // A row with no visible key yet keeps m = -inf; subtract 0 then (not -inf - -inf = NaN).
        const float m_use = m_new == -INFINITY ? 0.0f : m_new;
        const float rescale = exp2f(m[rr] - m_use);  // 0 while m was -inf
        float sum = 0.0f;
#pragma unroll
        for (int nt = 0; nt < kKeys / 8; ++nt) {
          s[nt][2 * rr] = exp2f(s[nt][2 * rr] - m_use);  // masked: 2^-inf = 0
          s[nt][2 * rr + 1] = exp2f(s[nt][2 * rr + 1] - m_use);
          sum += s[nt][2 * rr] + s[nt][2 * rr + 1];
        }
        l[rr] = l[rr] * rescale + sum;
        m[rr] = m_new;
#pragma unroll
        for (int dn = 0; dn < kD / 8; ++dn) {
          o[dn][2 * rr] *= rescale;
          o[dn][2 * rr + 1] *= rescale;
        }
      }

      // O += P·V, 16 keys (kk) at a time. ldmatrix.trans: lane (8·mat + r) addresses key
      // 16kk + r + 8·(mat & 1), dims 16dp + 8·(mat >> 1): registers 0/1 are b0/b1 of the dims
      // 16dp..16dp+7, registers 2/3 those of 16dp+8..16dp+15.
#pragma unroll
      for (int kk = 0; kk < kKeys / 16; ++kk) {
        const uint32_t a[4] = {flash_pack<T>(s[2 * kk][0], s[2 * kk][1]),
                               flash_pack<T>(s[2 * kk][2], s[2 * kk][3]),
                               flash_pack<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                               flash_pack<T>(s[2 * kk + 1][2], s[2 * kk + 1][3])};
        const int mat = lane >> 3;
        const T* v_row = v_tile + (kk * 16 + (lane & 7) + 8 * (mat & 1)) * kStride + 8 * (mat >> 1);
#pragma unroll
        for (int dp = 0; dp < kD / 16; ++dp) {
          uint32_t b[4];
          flash_ldmatrix_x4_trans(b, v_row + dp * 16);
          flash_mma<T>(o[2 * dp], a, b[0], b[1]);
          flash_mma<T>(o[2 * dp + 1], a, b[2], b[3]);
        }
      }
      __syncthreads();  // the next iteration copies tile i + 2 into this stage
    }
  }  // passes

  // The row sums over the row's 4 lanes, the sink, and the output (NaN for a position outside
  // the cache; nothing for padding rows).
  bool row_valid[2];
#pragma unroll
  for (int rr = 0; rr < 2; ++rr) row_valid[rr] = last_s[row0 + 8 * rr] >= 0;
  const float sink_log2 =
      sinks != nullptr ? to_float(sinks[h]) * kLog2e : -INFINITY;  // read after pdl_wait
#pragma unroll
  for (int rr = 0; rr < 2; ++rr) {
    float total = l[rr];
    total += __shfl_xor_sync(0xffffffffu, total, 1);
    total += __shfl_xor_sync(0xffffffffu, total, 2);
    float factor = 1.0f;
    if (sinks != nullptr && row_valid[rr]) {
      const float m_new = fmaxf(m[rr], sink_log2);  // m finite: key p is always visible
      factor = exp2f(m[rr] - m_new);
      total = total * factor + exp2f(sink_log2 - m_new);
    }
    const float inv = factor / total;
    const int t = t0 + row0 + 8 * rr;
    if (t >= tokens) continue;
    T* o_row = out + (static_cast<int64_t>(t) * dims.heads + h) * kD + 2 * tig;
    const float nan = __int_as_float(0x7fc00000);
    const bool valid = row_valid[rr];
#pragma unroll
    for (int dn = 0; dn < kD / 8; ++dn) {
      const float x = valid ? o[dn][2 * rr] * inv : nan;
      const float y = valid ? o[dn][2 * rr + 1] * inv : nan;
      *reinterpret_cast<uint32_t*>(o_row + dn * 8) = flash_pack<T>(x, y);
    }
  }
}

template <typename T, int kD>
void launch_attention_flash_dim(const AttentionDims& dims, const AttentionArgs& a,
                                cudaStream_t stream) {
  const auto kernel = attention_flash_prefill_kernel<T, kD>;
  const size_t shared = flash_shared_bytes(kD, sizeof(T));
  opt_in_dynamic_shared(attention_flash_prefill_kernel<T, kD>, shared);
  const int64_t query_tiles = (a.tokens + kFlashRows - 1) / kFlashRows;
  const dim3 grid(static_cast<unsigned>(dims.heads), static_cast<unsigned>(query_tiles));
  launch_pdl(kernel, grid, dim3(kFlashThreads), shared, stream, dims, static_cast<const T*>(a.q),
             a.positions, static_cast<const T*>(a.k_cache), static_cast<const T*>(a.v_cache),
             static_cast<const T*>(a.sinks), static_cast<T*>(a.out), static_cast<int>(a.tokens),
             static_cast<int>(a.max_seq_len), a.kv);
}

// The flash prefill path; the caller checked flash_prefill_unsupported (BF16/F16 only).
template <typename T>
void launch_attention_flash(const AttentionDims& dims, const AttentionArgs& a,
                            cudaStream_t stream) {
  const char* why_not = flash_prefill_unsupported(dims, sizeof(T), a);
  MG_ASSERT(why_not == nullptr, "attention: flash prefill forced on an unsupported launch: {}",
            why_not != nullptr ? why_not : "");
  if constexpr (sizeof(T) == 2) {
    if (dims.head_dim == 64) return launch_attention_flash_dim<T, 64>(dims, a, stream);
    return launch_attention_flash_dim<T, 128>(dims, a, stream);
  }
}

}  // namespace mg::cuda
