// When the CUDA flash prefill kernel pays on a paged batch (the Engine's forwards), from the
// batch's make-up the host describes (KvBatch::flash_passes). Host only and free of CUDA headers,
// so the CPU unit tests check the rule; attention_cuda.h's flash_prefill_chosen applies it.
#pragma once

#include <cstdint>

#include "framework/op/kv_batch.h"

namespace mg {

// A paged batch takes the flash kernel when its passes are at most this many per 64-row tile.
// Why a bound on passes per tile: a flash block (64 rows, one head) runs its tile's passes one
// after another, each over its slot's visible keys, while the per-query kernel runs every
// (row, head) as its own block at once. Prompt chunks are one pass per tile (a tile that
// straddles two chunks: two), where flash is 18-42x faster per layer on long prompts; a tile of
// decode rows of 64 sequences would be 64 serial passes. 2 lets every tile straddle a chunk
// boundary, or a few decode rows ride along with a long chunk, and keeps decode-heavy batches
// (a pass per row) per query. Not yet measured on a GPU: the paged lines of `mg_cuda_tests
// --gtest_filter='CudaAttentionPrefill.TimesPagedBatchesBothPaths'` (MG_ATTN_TIMING=1: 4 prompts ×
// 512 tokens, 1 prompt × 512 + 8 / 16 / 64 decode rows, each with its passes per tile) tune it:
// raise it while flash still wins the batches with decode rows, lower it if flash loses one the
// rule takes. The count ignores how long each pass is (a decode row's pass walks its whole
// context): the test's 4096-key decode rows show whether that matters.
constexpr int64_t kFlashPagedMaxPassesPerTile = 2;

// Whether the flash kernel pays on a paged batch of `tokens` rows described by `kv`: its
// flash_passes is known (not 0) and at most kFlashPagedMaxPassesPerTile per tile.
inline bool flash_passes_pay(const KvBatch& kv, int64_t tokens) {
  const int64_t tiles = (tokens + kFlashPassTileRows - 1) / kFlashPassTileRows;
  return kv.flash_passes > 0 && tiles > 0 && kv.flash_passes <= kFlashPagedMaxPassesPerTile * tiles;
}

}  // namespace mg
