// CUDA attention launchers: the KV-cache write and causal GQA attention over the cache, with
// sliding window, chunks, sinks and v_head_dim != head_dim (semantics in attention.h).
//
// The KV-cache write: launch_attention given the call's K and V rows (AttentionArgs::k, v) writes
// them into the cache. The split-KV kernel does it in the same launch (attention_fuses_kv_write):
// it reads every key that this call writes from k/v rather than from the cache, and one block
// per (row, KV head) stores the row; the other paths (per query, flash prefill) launch
// kv_cache_write_kernel first. Decode pays one launch fewer per layer.
//
// Three attention paths (attention_cuda.cuh and attention_flash_cuda.cuh have the kernels):
//  - flash prefill (BF16/F16, head_dim == v_head_dim in {64, 128}): a block per (64 query rows,
//    head), tiles of 64 keys, mma.sync tensor cores, online softmax in registers; contiguous
//    caches, and paged batches whose tiles are mostly one sequence each (a paged cache: one pass
//    over the keys per sequence among the block's rows; flash_prefill_chosen says when).
//  - per query (everything else): one block per (head, query row); many rows fill the GPU by
//    themselves.
//  - split-KV (decode, flash-decoding; also paged batches of decode rows that the flash kernel
//    declines, at one split): few query rows would launch only heads × rows blocks, so
//    each (row, KV head) splits its visible keys over several blocks; one block scores its keys
//    against every query head of the GQA group (K and V read once per group, copied to shared
//    memory a tile ahead) and leaves (max, denominator, unnormalised output) in the workspace; the
//    last block of the row to finish (a counter per row and KV head) combines the splits, adds
//    the sink and writes the row: one kernel launch.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <string>

#include "framework/core/error.h"
#include "ops/nn/attention/attention_cpu.h"
#include "ops/nn/attention/attention_flash_rule.h"

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

// Which attention kernel a launch takes. kAuto: split-KV when split_kv_chosen() says so, else
// flash prefill when flash_prefill_chosen() says so, else split-KV when
// split_kv_chosen_for_paged_batch() says so, else per query; the others force a path (tests
// compare them on the same inputs).
enum class AttentionPath { kAuto, kPerQuery, kSplitKv, kFlashPrefill };

// Split-KV bounds. Any launch of up to kSplitKvMaxTokens query rows takes it (decode, batched
// decode with one new token per sequence, short chunks).
constexpr int64_t kSplitKvMaxTokens = 64;
// A paged batch of up to kSplitKvPagedMaxTokens rows that the flash kernel does not take (the
// Engine's decode steps of many sequences, decode rows beside prompt chunks) takes it too, at one
// split (rows × KV heads blocks already fill the GPU): the per-query kernel it replaces reads
// every K and V row once per query head, where a split block reads it once for the GQA group.
// `MG_ATTN_TIMING=1 mg_cuda_tests --gtest_filter='CudaAttentionPrefill.TimesPagedBatchesBothPaths'`
// on an H200 (2026-12-03, docs/performance.md), µs per-query → split-KV (the qwen3 layer, the
// rows' KV write included): 128 decode rows of 160 keys 163.3 → 51.4, 512 of 160 keys 588.0 →
// 199.7, 128 of 4096 keys 4084.5 → 938.9, 3 prompts × 128 + 128 decode rows 303.2 → 135.1, one
// 512-token prompt + 64 decode rows of 1024 keys (576 rows) 1179.7 → 411.5, 4 prompts × 512 + 16
// decode rows (2064 rows, which flash takes in 914.1) 2980.7 → 1144.1. The bound keeps the
// workspace (rows × heads × (v_head_dim + 2) floats: 34 MB for Qwen3-30B-A3B) in proportion.
constexpr int64_t kSplitKvPagedMaxTokens = 2048;
// Rows whose K and V the split kernel writes into the cache itself (attention_fuses_kv_write):
// each warp lists them in shared memory, in two rounds of 32.
constexpr int64_t kSplitKvFusedWriteMaxTokens = 64;
constexpr int64_t kSplitKvMaxSplits = 64;
// No split is made shorter than this many keys: a split costs the combine one more partial row
// per head to read (the last block reads them all), about what scoring this many keys costs.
// The one constant to retune from the forced-split lines of `mg_cuda_tests
// --gtest_filter='CudaAttentionDecode.TimesBothPathsOnTheQwen3Shape'`: before the lighter kernel
// (H100, docs/performance.md issue 15) 512 keys took 9.4 µs in 16 splits and 10.3 in the rule's
// 32, 4096 keys 17.2 in 32; 32 here would give 16 splits at 512 keys and keep 32 at 4096.
constexpr int64_t kSplitKvMinKeys = 16;
// Splits' partials the combining block has in flight per thread (one L2 round trip per batch).
constexpr int kSplitKvCombineBatch = 16;
// Query heads one block serves (the GQA group, or an 8-head slice of a larger one).
constexpr int64_t kSplitKvMaxHeads = 8;
// Keys per shared-memory tile (a power of two in [kSplitKvMinTileKeys, kSplitKvMaxTileKeys]);
// the rule takes kSplitKvTileKeys unless two stages of K and V rows would not fit
// kSplitKvMaxSharedBytes (wide heads, F32). 64: the H100 grid of `mg_cuda_tests
// --gtest_filter='CudaAttentionDecode.TimesBothPathsOnTheQwen3Shape'` (docs/performance.md), at the
// rule's split counts, µs for 32 / 64-key tiles: 512 keys 10.7 / 10.5, 4096 keys 23.0 / 17.4,
// 16 paged sequences of 512 keys 37.8 / 27.9.
constexpr int64_t kSplitKvTileKeys = 64;
constexpr int64_t kSplitKvMinTileKeys = 8;
constexpr int64_t kSplitKvMaxTileKeys = 256;
constexpr size_t kSplitKvMaxSharedBytes = 96 * 1024;

struct AttentionArgs {
  const void* q = nullptr;             // [tokens, heads * head_dim]
  const int32_t* positions = nullptr;  // [tokens]
  // This call's keys and values, written into the cache at (row t's slot, positions[t]) as
  // launch_kv_cache_write does (positions outside the cache and blocks outside the pool are
  // skipped) before any query reads them; null: the cache already holds every visible key.
  const void* k = nullptr;      // [tokens, kv_heads * head_dim] or null
  const void* v = nullptr;      // [tokens, kv_heads * v_head_dim] or null
  void* k_cache = nullptr;      // [cache rows, kv_heads, head_dim]
  void* v_cache = nullptr;      // [cache rows, kv_heads, v_head_dim]
  const void* sinks = nullptr;  // [heads] or null
  void* out = nullptr;          // [tokens, heads * v_head_dim]
  int64_t tokens = 0;
  int64_t max_seq_len = 0;  // positions per sequence
  KvBatch kv;               // device pointers; all null: one contiguous sequence
  // Split-KV scratch: at least split_kv_workspace_bytes(dims, tokens, splits) bytes, or null.
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  // Split-KV: one counter per (row, KV head, head tile), split_kv_counter_count(dims, tokens) of
  // them, zero before the first launch; every launch leaves them zero (device memory owned by the
  // caller, e.g. the op's state, so that no other op writes them between launches). Null: the
  // auto rule keeps the per-query kernel.
  unsigned* split_counters = nullptr;
  int64_t split_counter_count = 0;
  int sm_count = 0;  // streaming multiprocessors of the device (split count rule)
  AttentionPath path = AttentionPath::kAuto;
  int64_t splits = 0;     // split-KV: splits per (row, KV head); 0: split_kv_splits()'s rule
  int64_t tile_keys = 0;  // split-KV: keys per shared-memory tile; 0: split_kv_tile_keys()'s rule
  // kAuto may take the flash prefill kernel (the op turns it off under MG_FLASH_PREFILL=0).
  bool flash_prefill = true;
};

// Whether the split-KV kernel takes these dims for elements of `element_bytes`: K and V rows
// must be whole 16-byte vectors (head_dim · element size a multiple of 16, which also keeps every
// row 16-byte aligned). Other head sizes (odd research shapes) stay on the per-query kernel.
inline bool split_kv_supports(const AttentionDims& dims, size_t element_bytes) {
  const auto whole_vectors = [&](int64_t dim) {
    return (dim * static_cast<int64_t>(element_bytes)) % 16 == 0;
  };
  return whole_vectors(dims.head_dim) && whole_vectors(dims.v_head_dim);
}

// Blocks the split kernel runs per (row, KV head): the GQA group in slices of kSplitKvMaxHeads.
inline int64_t split_kv_head_tiles(const AttentionDims& dims) {
  const int64_t group = dims.heads / dims.kv_heads;
  return (group + kSplitKvMaxHeads - 1) / kSplitKvMaxHeads;
}

// Splits per (row, KV head) for `tokens` rows whose visible ranges are at most `max_keys` keys.
// Rule: the blocks of one wave at the kernel's two blocks an SM (a decode step has tokens × KV
// heads × head tiles block rows, each split S ways, so S = floor(2 SMs / block rows), at least
// 1): each extra split is one more partial for the combining block to read, so above
// kSplitKvCombineBatch S is rounded down to whole combine batches (66 → 64: one L2 round trip
// fewer for the combine). `mg_cuda_tests
// --gtest_filter='CudaAttentionDecode.TimesBothPathsOnTheQwen3Shape'` on an H200 (2026-12-02,
// docs/performance.md), µs: 16 paged sequences of 512 keys at 3 splits (one block an SM, the rule
// before) 27.6, at 4 (two) 21.9; one sequence of 4096 keys at 32 / 64 splits 15.3 / 15.0; of 512
// keys 32 splits of 16 keys either way. No split is shorter than kSplitKvMinKeys keys of the
// longest range; at most kSplitKvMaxSplits. The rule only bounds S (and the workspace): the kernel
// splits each row's actual range [first, p], known on the device, into min(S, ceil(keys /
// kSplitKvMinKeys)) parts, so a short context uses fewer splits. Qwen3-30B-A3B (4 KV heads, 8-query
// groups) decoding one sequence on 132 SMs: S = 64, and a 512-key context is 32 splits of 16 keys,
// 128 blocks; 16 sequences: S = 4, 256 blocks.
inline int64_t split_kv_splits(const AttentionDims& dims, int64_t tokens, int64_t max_keys,
                               int sm_count) {
  if (dims.sliding_window > 0) max_keys = std::min(max_keys, dims.sliding_window);
  if (dims.chunk_size > 0) max_keys = std::min(max_keys, dims.chunk_size);
  const int64_t rows = std::max<int64_t>(1, tokens * dims.kv_heads * split_kv_head_tiles(dims));
  int64_t want = std::max<int64_t>(1, 2 * static_cast<int64_t>(std::max(sm_count, 1)) / rows);
  if (want > kSplitKvCombineBatch) want -= want % kSplitKvCombineBatch;
  const int64_t longest = (max_keys + kSplitKvMinKeys - 1) / kSplitKvMinKeys;
  return std::clamp<int64_t>(std::min(want, longest), 1, kSplitKvMaxSplits);
}

// Workspace of one split-KV launch: per (row, head, split) v_head_dim floats of unnormalised
// output, then its max and denominator.
inline size_t split_kv_workspace_bytes(const AttentionDims& dims, int64_t tokens, int64_t splits) {
  return static_cast<size_t>(tokens * dims.heads * splits * (dims.v_head_dim + 2)) * sizeof(float);
}

// Counters a split-KV launch of `tokens` rows uses (AttentionArgs::split_counters).
inline int64_t split_kv_counter_count(const AttentionDims& dims, int64_t tokens) {
  return tokens * dims.kv_heads * split_kv_head_tiles(dims);
}

// Query heads the split kernel is instantiated for: the block's heads rounded up to 1, 2, 4, 8.
inline int64_t split_kv_block_heads(const AttentionDims& dims) {
  const int64_t heads = std::min(dims.heads / dims.kv_heads, kSplitKvMaxHeads);
  int64_t bucket = 1;
  while (bucket < heads) bucket *= 2;
  return bucket;
}

// Dynamic shared memory of a split block with tiles of `tile_keys` keys: two stages of K and V
// rows, q of the block's heads and the tile's scores (F32), two stages of cache rows.
inline size_t split_kv_shared_bytes(const AttentionDims& dims, size_t element_bytes,
                                    int64_t tile_keys) {
  const int64_t heads = split_kv_block_heads(dims);
  return static_cast<size_t>(2 * tile_keys * (dims.head_dim + dims.v_head_dim)) * element_bytes +
         static_cast<size_t>(heads * (dims.head_dim + tile_keys)) * sizeof(float) +
         static_cast<size_t>(2 * tile_keys) * sizeof(int64_t);
}

// Keys per tile: kSplitKvTileKeys, halved while the shared memory would exceed
// kSplitKvMaxSharedBytes (F32 rows of 512 elements: 8 keys).
inline int64_t split_kv_tile_keys(const AttentionDims& dims, size_t element_bytes) {
  int64_t tile = kSplitKvTileKeys;
  while (tile > kSplitKvMinTileKeys &&
         split_kv_shared_bytes(dims, element_bytes, tile) > kSplitKvMaxSharedBytes) {
    tile /= 2;
  }
  return tile;
}

// Whether the split kernel can run `tokens` rows of these dims at the rule's split count: it
// supports the dims and the workspace holds the launch.
inline bool split_kv_launch_fits(const AttentionDims& dims, size_t element_bytes, int64_t tokens,
                                 int64_t max_keys, int sm_count, size_t workspace_bytes) {
  return split_kv_supports(dims, element_bytes) &&
         workspace_bytes >= split_kv_workspace_bytes(
                                dims, tokens, split_kv_splits(dims, tokens, max_keys, sm_count));
}

// The auto rule: split-KV for at most kSplitKvMaxTokens rows it can run (callers without a
// workspace, or without counters, keep the per-query kernel).
inline bool split_kv_chosen(const AttentionDims& dims, size_t element_bytes, int64_t tokens,
                            int64_t max_keys, int sm_count, size_t workspace_bytes) {
  return tokens <= kSplitKvMaxTokens &&
         split_kv_launch_fits(dims, element_bytes, tokens, max_keys, sm_count, workspace_bytes);
}

// The auto rule's second use of split-KV, after the flash kernel declined: a paged batch of up to
// kSplitKvPagedMaxTokens rows (kSplitKvPagedMaxTokens above says why) it can run.
inline bool split_kv_chosen_for_paged_batch(const AttentionDims& dims, size_t element_bytes,
                                            int64_t tokens, bool paged, int64_t max_keys,
                                            int sm_count, size_t workspace_bytes) {
  return paged && tokens <= kSplitKvPagedMaxTokens &&
         split_kv_launch_fits(dims, element_bytes, tokens, max_keys, sm_count, workspace_bytes);
}

// The split kernel's 16-byte copies and 8/16-byte stores need the caches, the output and the
// workspace aligned (device allocations are; a view at an odd offset would not be); writing the
// call's rows itself, k and v too.
inline bool split_kv_pointers_aligned(const AttentionArgs& a) {
  const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  return aligned(a.k_cache) && aligned(a.v_cache) && aligned(a.out) && aligned(a.workspace);
}
inline bool split_kv_rows_aligned(const AttentionArgs& a) {
  const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  return aligned(a.k) && aligned(a.v);
}

// The kernel launch_attention takes (AttentionArgs::path, kAuto resolved): split-KV when
// split_kv_chosen says so for a launch with aligned pointers and enough counters, else flash
// prefill when flash_prefill_chosen says so, else split-KV when split_kv_chosen_for_paged_batch
// says so (with the same pointers and counters), else per query.
AttentionPath attention_path_taken(const AttentionDims& dims, size_t element_bytes,
                                   const AttentionArgs& a);

// Whether launch_attention writes this call's K and V rows inside the attention kernel (no
// kv_cache_write launch): they are given (16-byte aligned), the split-KV kernel is taken, and the
// call has at most kSplitKvFusedWriteMaxTokens rows (the kernel keeps the list of rows whose keys
// it reads from k/v rather than from the cache, a row of another row's sequence included: a chunk's
// row t sees the positions rows < t write in the same call).
inline bool attention_fuses_kv_write(const AttentionDims& dims, size_t element_bytes,
                                     const AttentionArgs& a) {
  return a.k != nullptr && a.v != nullptr && split_kv_rows_aligned(a) &&
         a.tokens <= kSplitKvFusedWriteMaxTokens &&
         attention_path_taken(dims, element_bytes, a) == AttentionPath::kSplitKv;
}

// The most workspace a launch of up to `max_tokens` rows takes under the auto rule (any context
// length), for OpKernel::workspace_bytes.
inline size_t split_kv_workspace_bound(const AttentionDims& dims, size_t element_bytes,
                                       int64_t max_tokens, int sm_count) {
  if (!split_kv_supports(dims, element_bytes)) return 0;
  size_t most = 0;
  for (int64_t t = 1; t <= std::min(max_tokens, kSplitKvPagedMaxTokens); ++t) {
    const int64_t splits = split_kv_splits(dims, t, INT64_MAX / 2, sm_count);
    most = std::max(most, split_kv_workspace_bytes(dims, t, splits));
  }
  return most;
}

// Flash prefill tiles: query rows per block (4 warps of 16) and keys per shared-memory tile.
constexpr int64_t kFlashRows = 64;
constexpr int64_t kFlashKeys = 64;
static_assert(kFlashRows == kFlashPassTileRows, "KvBatch::flash_passes counts tiles of kFlashRows");

// Why the flash prefill kernel cannot take this launch, or null when it can (forced, or chosen
// by flash_prefill_chosen). Host only: the launch's pointers and shape.
inline const char* flash_prefill_unsupported(const AttentionDims& dims, size_t element_bytes,
                                             const AttentionArgs& a) {
  const auto aligned = [](const void* p, uintptr_t bytes) {
    return reinterpret_cast<uintptr_t>(p) % bytes == 0;
  };
  if (element_bytes != 2) return "not BF16/F16 (the mma.sync tensor-core path)";
  if (dims.head_dim != dims.v_head_dim) return "v_head_dim != head_dim";
  if (dims.head_dim != 64 && dims.head_dim != 128) return "head_dim not 64 or 128";
  if (a.max_seq_len > INT32_MAX) return "positions beyond int32";
  if (a.kv.block_tables != nullptr &&
      (a.kv.block_size <= 0 || a.kv.max_blocks_per_seq * a.kv.block_size > INT32_MAX)) {
    return "paged cache positions beyond int32";
  }
  if ((a.tokens + kFlashRows - 1) / kFlashRows > 65535) return "more than 65535 query tiles";
  if (dims.heads > 65535) return "more than 65535 heads";
  if (!aligned(a.q, 16) || !aligned(a.k_cache, 16) || !aligned(a.v_cache, 16) ||
      !aligned(a.out, 4)) {
    return "q, k_cache or v_cache not 16-byte aligned, or out not 4-byte aligned";
  }
  return nullptr;
}

// The auto rule's choice of the flash prefill kernel (for launches split-KV does not take): the
// caller allows it (AttentionArgs::flash_prefill, MG_FLASH_PREFILL), flash_prefill_unsupported has
// no objection, and the cache is contiguous or the paged batch's make-up says it pays. The flash
// kernel makes one pass over the keys per sequence among a block's 64 rows, which the op cannot
// see on the device pointers alone (the Engine's 128 decode rows of 128 sequences would be 64
// serial passes per block, where the split-KV kernel runs 128 × KV heads blocks at once): the
// Session describes its batch on the host (KvBatch::flash_passes), and flash_passes_pay
// (attention_flash_rule.h) takes flash when the tiles are mostly one sequence each (prompt
// chunks); an undescribed paged batch (flash_passes 0, a captured decode step) is left to
// split-KV or the per-query kernel. Forced
// (AttentionPath::kFlashPrefill) it is right for any batch.
inline bool flash_prefill_chosen(const AttentionDims& dims, size_t element_bytes,
                                 const AttentionArgs& a) {
  return a.flash_prefill && (a.kv.block_tables == nullptr || flash_passes_pay(a.kv, a.tokens)) &&
         flash_prefill_unsupported(dims, element_bytes, a) == nullptr;
}

inline AttentionPath attention_path_taken(const AttentionDims& dims, size_t element_bytes,
                                          const AttentionArgs& a) {
  switch (a.path) {
    case AttentionPath::kAuto: {
      const bool split_fits = split_kv_pointers_aligned(a) && a.split_counters != nullptr &&
                              a.split_counter_count >= split_kv_counter_count(dims, a.tokens);
      const size_t workspace_bytes = a.workspace != nullptr ? a.workspace_bytes : 0;
      if (split_fits && split_kv_chosen(dims, element_bytes, a.tokens, a.max_seq_len, a.sm_count,
                                        workspace_bytes)) {
        return AttentionPath::kSplitKv;
      }
      if (flash_prefill_chosen(dims, element_bytes, a)) return AttentionPath::kFlashPrefill;
      if (split_fits && split_kv_chosen_for_paged_batch(dims, element_bytes, a.tokens,
                                                        a.kv.block_tables != nullptr, a.max_seq_len,
                                                        a.sm_count, workspace_bytes)) {
        return AttentionPath::kSplitKv;
      }
      return AttentionPath::kPerQuery;
    }
    case AttentionPath::kSplitKv:
    case AttentionPath::kFlashPrefill:
    case AttentionPath::kPerQuery:
      return a.path;
  }
  return AttentionPath::kPerQuery;
}

// Rows [first, end) of `a` as a launch of their own: q, out, positions and the row slots start at
// row `first`; the call's K and V rows are left out (launch_attention writes them for every row
// before either launch) and the batch's host description is that of the rows: `flash_passes`,
// no decode rows.
inline AttentionArgs attention_rows(const AttentionDims& dims, size_t element_bytes,
                                    const AttentionArgs& a, int64_t first, int64_t end,
                                    int64_t flash_passes) {
  AttentionArgs r = a;
  r.q = static_cast<const char*>(a.q) +
        static_cast<size_t>(first * dims.heads * dims.head_dim) * element_bytes;
  r.out = static_cast<char*>(a.out) +
          static_cast<size_t>(first * dims.heads * dims.v_head_dim) * element_bytes;
  r.positions = a.positions + first;
  if (a.kv.row_slots != nullptr) r.kv.row_slots = a.kv.row_slots + first;
  r.k = r.v = nullptr;
  r.tokens = end - first;
  r.kv.flash_passes = flash_passes;
  r.kv.decode_rows = 0;
  r.kv.chunk_flash_passes = 0;
  return r;
}

// Whether launch_attention runs a paged batch (auto rule, beyond kSplitKvMaxTokens rows) as two
// launches by kind of row: its first kv.decode_rows rows (each its sequence's only row) on the
// split-KV kernel and the prompt chunks after them on the flash kernel, when each kernel would
// take its rows as a launch of their own. One launch takes one kernel for all rows, and on a
// flash tile a decode row is a serial pass over its whole context: `MG_ATTN_TIMING=1
// mg_cuda_tests --gtest_filter='CudaAttentionPrefill.TimesPagedBatchesBothPaths'` has the batches
// (docs/performance.md).
inline bool attention_takes_row_kinds(const AttentionDims& dims, size_t element_bytes,
                                      const AttentionArgs& a) {
  const int64_t d = a.kv.decode_rows;
  if (a.path != AttentionPath::kAuto || a.kv.block_tables == nullptr || d <= 0 || d >= a.tokens ||
      a.tokens <= kSplitKvMaxTokens) {
    return false;
  }
  const AttentionArgs decode = attention_rows(dims, element_bytes, a, 0, d, 0);
  const AttentionArgs chunks =
      attention_rows(dims, element_bytes, a, d, a.tokens, a.kv.chunk_flash_passes);
  return attention_path_taken(dims, element_bytes, decode) == AttentionPath::kSplitKv &&
         flash_prefill_chosen(dims, element_bytes, chunks);
}

// What MG_FLASH_PREFILL's value asks for: unset (null) or "1": the auto rule may take the flash
// prefill kernel; "0": it never does (split-KV or the per-query kernel as before it: A/B timing of
// whole models, a suspected flash bug). Anything else is an mg::Error naming the variable.
inline bool flash_prefill_requested_by(const char* value) {
  if (value == nullptr) return true;
  const std::string text(value);
  MG_CHECK(text == "0" || text == "1", "MG_FLASH_PREFILL must be 0 or 1, got '{}'", text);
  return text == "1";
}

// Writes row t of k and v at the cache row of (its slot, positions[t]) (kv_batch.h). Positions
// outside [0, max_seq_len) and blocks outside the pool are skipped (the Session checks them on
// the host before a forward).
template <typename T>
void launch_kv_cache_write(const AttentionDims& dims, const KvCacheWriteArgs& args,
                           cudaStream_t stream);

// With args.k and args.v, first writes row t of them at the cache row of (its slot, positions[t])
// (launch_kv_cache_write's rule; inside the split-KV kernel when attention_fuses_kv_write). Then
// query t attends to its sequence's positions [first visible, positions[t]] (through its block
// table when paged); fp32 scores and softmax. A query whose position lies outside the cache gets
// a NaN row. head_dim and v_head_dim <= kAttentionMaxHeadDim. args.path picks the kernel (a
// forced kSplitKv needs split_kv_supports and the workspace). No host synchronisation: both
// paths can be captured in a CUDA graph. T: float, __half or __nv_bfloat16
// (attention_cuda_<dtype>.cu).
template <typename T>
void launch_attention(const AttentionDims& dims, const AttentionArgs& args, cudaStream_t stream);

}  // namespace mg::cuda
