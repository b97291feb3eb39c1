// Where the rows of one forward keep their keys and values: the paged KV cache of attention
// states. Plain data (no framework types) so CUDA launchers can take it by value.
#pragma once

#include <cstdint>

namespace mg {

// Query rows per tile of the CUDA flash prefill kernel (kFlashRows in attention_cuda.h, which
// asserts they agree): KvBatch::flash_passes counts the kernel's passes over tiles of this many
// rows.
constexpr int64_t kFlashPassTileRows = 64;

// Row t of a forward belongs to sequence slot row_slots[t] (all rows are slot 0 when null).
// With block_tables, position j of slot s lives in cache row
//   block_tables[s * max_blocks_per_seq + j / block_size] * block_size + j % block_size
// (blocks of block_size rows taken from a pool of num_blocks, so a sequence grows by taking one
// more block and nothing moves); without, the cache is one contiguous sequence: position j is
// row j. Pointers are in the memory of the plan's device (the host for CPU plans).
struct KvBatch {
  const int32_t* row_slots = nullptr;     // [tokens] or null
  const int32_t* block_tables = nullptr;  // [slots, max_blocks_per_seq] or null
  int64_t max_blocks_per_seq = 0;
  int64_t block_size = 0;
  int64_t num_blocks = 0;
  // The batch's make-up as the host knows it (no device code reads it; launchers choose by it): the
  // sum over the forward's tiles of kFlashPassTileRows rows (rows [64i, 64i + 64)) of the number of
  // distinct slots among the tile's rows, count_flash_passes(host row_slots, tokens). The flash
  // prefill kernel makes one pass over the keys per distinct slot of its tile, so passes close to
  // the tile count (prompt chunks: tiles of one sequence) let the auto rule take it for a paged
  // batch (flash_passes_pay, attention_flash_rule.h), and many more (a tile of decode rows of many
  // sequences) take the split-KV kernel (attention_cuda.h, kSplitKvPagedMaxTokens). 0: unknown (the
  // launchers assume the worst); the Session leaves it 0 for forwards it captures in a CUDA graph
  // (replayed for other batches of the same row count, whose make-up differs).
  int64_t flash_passes = 0;
  // The batch's first decode_rows rows are each the only row of its sequence in the forward (the
  // Engine puts its decode rows before the prompt chunks: count_leading_single_rows), and
  // chunk_flash_passes is count_flash_passes of the rows after them. The CUDA launcher then runs
  // those rows on the split-KV kernel and the chunks on the flash kernel, where one flash launch
  // would walk each decode row's whole context in its tile's blocks (attention_cuda.h,
  // attention_takes_row_kinds). Host knowledge like flash_passes: 0 when unknown (captured
  // forwards) or when the batch does not start with such rows.
  int64_t decode_rows = 0;
  int64_t chunk_flash_passes = 0;
};

// KvBatch::flash_passes of `tokens` rows whose slots are `row_slots` (host memory; null: one
// sequence, a pass per tile). One pass over the rows: a row of the previous row's slot (prompt
// chunks) costs one comparison, any other row a look-up among its tile's slots seen so far (at
// most kFlashPassTileRows).
inline int64_t count_flash_passes(const int32_t* row_slots, int64_t tokens) {
  if (tokens <= 0) return 0;
  if (row_slots == nullptr) return (tokens + kFlashPassTileRows - 1) / kFlashPassTileRows;
  int64_t passes = 0;
  int32_t seen[kFlashPassTileRows];
  int64_t distinct = 0;
  for (int64_t t = 0; t < tokens; ++t) {
    const bool tile_start = t % kFlashPassTileRows == 0;
    if (tile_start) distinct = 0;
    const int32_t slot = row_slots[t];
    if (!tile_start && row_slots[t - 1] == slot) continue;
    bool known = false;
    for (int64_t i = 0; i < distinct && !known; ++i) known = seen[i] == slot;
    if (known) continue;
    seen[distinct++] = slot;
    ++passes;
  }
  return passes;
}

// KvBatch::decode_rows of `tokens` rows whose slots are `row_slots` (host memory; null: one
// sequence, 0): the leading rows up to the first whose sequence goes on in the next row (a prompt
// chunk's first row); the whole batch when no row is followed by one of its sequence. Where each
// sequence's rows are contiguous (the Engine's batches) every row of the run is its sequence's
// only row. Only the kernels' speed depends on it: the two launches read every key from the cache,
// which the call's KV write fills before both.
inline int64_t count_leading_single_rows(const int32_t* row_slots, int64_t tokens) {
  if (row_slots == nullptr || tokens <= 0) return 0;
  int64_t t = 0;
  for (; t < tokens; ++t) {
    if (t + 1 < tokens && row_slots[t + 1] == row_slots[t]) break;
  }
  return t;
}

}  // namespace mg
