// When the CUDA flash prefill kernel pays on a paged batch (the Engine's forwards), from the
// batch's make-up the host describes (KvBatch::flash_passes). Host only and free of CUDA headers,
// so the CPU unit tests check the rule; attention_cuda.h's flash_prefill_chosen applies it.
#pragma once

#include <cstdint>

#include "framework/op/kv_batch.h"

namespace mg {

// A paged batch takes the flash kernel when its passes are at most this many per 64-row tile.
// Why a bound on passes per tile: a flash block (64 rows, one head) runs its tile's passes one
// after another, each over its slot's visible keys, while the split-KV kernel runs every
// (row, KV head) as its own block at once. Prompt chunks are one pass per tile (a tile that
// straddles two chunks: two), where flash is 18-42x faster per layer on long prompts; a tile of
// decode rows of 64 sequences would be 64 serial passes. 2 lets every tile straddle a chunk
// boundary, or a few decode rows ride along with a long chunk, and leaves decode-heavy batches
// (a pass per row) to the split-KV kernel (kSplitKvPagedMaxTokens in attention_cuda.h).
// `MG_ATTN_TIMING=1 mg_cuda_tests --gtest_filter='CudaAttentionPrefill.TimesPagedBatchesBothPaths'`
// on an H200 (2026-12-03, docs/performance.md), µs flash / split-KV: 4 prompts × 512 tokens 83.4
// / 1115.8; with 16 decode rows of 1024 keys 914.1 / 1144.1; 1 prompt × 512 + 8 decode rows of
// 1024 keys 453.2 / 311.3, + 4 of 4096 keys 884.1 / 407.7. The count ignores how long each pass
// is, and a long decode row riding along makes its tile's flash block the tail: where flash takes
// such a batch, split-KV is up to 2x faster. A paged batch whose decode rows come first is
// therefore two launches, the decode rows on split-KV and the chunks on flash
// (attention_takes_row_kinds in attention_cuda.h); this bound then judges the chunks alone.
constexpr int64_t kFlashPagedMaxPassesPerTile = 2;

// Whether the flash kernel pays on a paged batch of `tokens` rows described by `kv`: its
// flash_passes is known (not 0) and at most kFlashPagedMaxPassesPerTile per tile.
inline bool flash_passes_pay(const KvBatch& kv, int64_t tokens) {
  const int64_t tiles = (tokens + kFlashPassTileRows - 1) / kFlashPassTileRows;
  return kv.flash_passes > 0 && tiles > 0 && kv.flash_passes <= kFlashPagedMaxPassesPerTile * tiles;
}

}  // namespace mg
