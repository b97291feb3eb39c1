// The host's description of a paged batch for the CUDA attention kernels' choice
// (KvBatch::flash_passes, count_flash_passes in kv_batch.h) and the rule that takes the flash
// prefill kernel from it (flash_passes_pay, attention_flash_rule.h): passes counted on batches of
// prompt chunks and decode rows as the Engine builds them (decode rows first), equal to a
// brute-force count of distinct slots per 64-row tile on random batches, and the rule's choice
// on each.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>
#include <vector>

#include "framework/op/kv_batch.h"
#include "ops/nn/attention/attention_flash_rule.h"

namespace mg {
namespace {

// The rows of a batch: each part is {slot, rows}, one after another.
std::vector<int32_t> batch_of(const std::vector<std::pair<int32_t, int64_t>>& parts) {
  std::vector<int32_t> slots;
  for (const auto& [slot, rows] : parts) slots.insert(slots.end(), static_cast<size_t>(rows), slot);
  return slots;
}

// `count` decode rows of slots first, first + 1, ...
std::vector<std::pair<int32_t, int64_t>> decode_rows(int32_t first, int32_t count) {
  std::vector<std::pair<int32_t, int64_t>> parts;
  for (int32_t s = 0; s < count; ++s) parts.push_back({first + s, 1});
  return parts;
}

int64_t passes_of(const std::vector<int32_t>& slots) {
  return count_flash_passes(slots.data(), static_cast<int64_t>(slots.size()));
}

bool pays(const std::vector<int32_t>& slots) {
  KvBatch kv;
  kv.flash_passes = passes_of(slots);
  return flash_passes_pay(kv, static_cast<int64_t>(slots.size()));
}

TEST(FlashPassesTest, CountsDistinctSlotsPerTile) {
  EXPECT_EQ(count_flash_passes(nullptr, 0), 0);
  EXPECT_EQ(count_flash_passes(nullptr, 64), 1);  // one sequence: a pass per tile
  EXPECT_EQ(count_flash_passes(nullptr, 65), 2);
  EXPECT_EQ(passes_of(batch_of({{3, 200}})), 4);  // one prompt chunk: 4 tiles, one pass each
  // Two chunks of 100: tiles {1}, {1, 2}, {2}, {2}.
  EXPECT_EQ(passes_of(batch_of({{1, 100}, {2, 100}})), 5);
  // A chunk boundary on a tile boundary costs nothing extra.
  EXPECT_EQ(passes_of(batch_of({{1, 64}, {2, 64}})), 2);
  // A sequence's rows on both sides of a tile boundary are a pass in each tile.
  EXPECT_EQ(passes_of(batch_of({{9, 60}, {5, 8}, {9, 60}})), 4);
  // 128 decode rows of 128 sequences: a pass per row.
  std::vector<std::pair<int32_t, int64_t>> decode = decode_rows(0, 128);
  EXPECT_EQ(passes_of(batch_of(decode)), 128);
  // Distinct slots, not runs: slots 0, 1, 0, 1, ... are two passes in a tile.
  std::vector<int32_t> alternating(64);
  for (size_t i = 0; i < alternating.size(); ++i) alternating[i] = static_cast<int32_t>(i % 2);
  EXPECT_EQ(passes_of(alternating), 2);
  // The Engine's order (decode rows first): 16 decode rows and a 512-row prompt are 9 tiles,
  // the first of 17 slots.
  std::vector<std::pair<int32_t, int64_t>> mixed = decode_rows(10, 16);
  mixed.push_back({2, 512});
  EXPECT_EQ(passes_of(batch_of(mixed)), 17 + 8);
}

TEST(FlashPassesTest, EqualsDistinctSlotsPerTileOnRandomBatches) {
  std::mt19937 rng(41);
  for (int trial = 0; trial < 200; ++trial) {
    // Runs of random slots (chunks and decode rows) of random lengths.
    std::vector<int32_t> slots;
    const int64_t tokens = std::uniform_int_distribution<int64_t>(1, 600)(rng);
    const int32_t slot_count = std::uniform_int_distribution<int32_t>(1, 80)(rng);
    while (static_cast<int64_t>(slots.size()) < tokens) {
      const int32_t slot = std::uniform_int_distribution<int32_t>(0, slot_count - 1)(rng);
      const int64_t run = std::uniform_int_distribution<int64_t>(1, trial % 2 == 0 ? 3 : 150)(rng);
      for (int64_t i = 0; i < run && static_cast<int64_t>(slots.size()) < tokens; ++i) {
        slots.push_back(slot);
      }
    }
    int64_t want = 0;
    for (int64_t t0 = 0; t0 < tokens; t0 += kFlashPassTileRows) {
      std::set<int32_t> distinct;
      for (int64_t t = t0; t < std::min(tokens, t0 + kFlashPassTileRows); ++t) {
        distinct.insert(slots[static_cast<size_t>(t)]);
      }
      want += static_cast<int64_t>(distinct.size());
    }
    EXPECT_EQ(passes_of(slots), want) << "trial " << trial;
  }
}

TEST(FlashPassesTest, RuleTakesFlashForTilesOfMostlyOneSequence) {
  // Unknown (0): never, whatever the rows.
  KvBatch unknown;
  EXPECT_FALSE(flash_passes_pay(unknown, 512));
  // Prompt chunks: one or two passes per tile.
  EXPECT_TRUE(pays(batch_of({{3, 512}})));
  EXPECT_TRUE(pays(batch_of({{0, 512}, {1, 512}, {2, 512}, {3, 512}})));
  EXPECT_TRUE(pays(batch_of({{1, 100}, {2, 100}})));
  // Two prompt chunks and 4 decode rows riding along (Engine order): 11 passes in 6 tiles.
  std::vector<std::pair<int32_t, int64_t>> few = decode_rows(10, 4);
  few.push_back({0, 200});
  few.push_back({1, 150});
  EXPECT_EQ(passes_of(batch_of(few)), 11);
  EXPECT_TRUE(pays(batch_of(few)));
  // Decode-heavy batches do not pay: 128 rows of 128 sequences, 70 rows of 70.
  EXPECT_FALSE(pays(batch_of(decode_rows(0, 128))));
  EXPECT_FALSE(pays(batch_of(decode_rows(0, 70))));
  // 16 decode rows beside a 512-row prompt: 25 passes in 9 tiles, beyond 2 per tile (the
  // timing test's "1 x 512 + 16 decode" line says whether flash would still win).
  std::vector<std::pair<int32_t, int64_t>> mixed = decode_rows(10, 16);
  mixed.push_back({2, 512});
  EXPECT_FALSE(pays(batch_of(mixed)));
  // The bound itself: kFlashPagedMaxPassesPerTile passes per tile pays, one more does not.
  KvBatch kv;
  kv.flash_passes = kFlashPagedMaxPassesPerTile * 3;
  EXPECT_TRUE(flash_passes_pay(kv, 3 * kFlashPassTileRows));
  EXPECT_TRUE(flash_passes_pay(kv, 2 * kFlashPassTileRows + 1));  // a partial tile counts
  kv.flash_passes += 1;
  EXPECT_FALSE(flash_passes_pay(kv, 3 * kFlashPassTileRows));
}

// KvBatch::decode_rows: the Engine's decode rows before its prompt chunks.
TEST(FlashPassesTest, CountsTheLeadingSingleRows) {
  const auto leading = [](const std::vector<int32_t>& slots) {
    return count_leading_single_rows(slots.data(), static_cast<int64_t>(slots.size()));
  };
  EXPECT_EQ(count_leading_single_rows(nullptr, 64), 0);  // one contiguous sequence
  EXPECT_EQ(leading({}), 0);
  // 4 decode rows, then two chunks: the decode rows.
  std::vector<std::pair<int32_t, int64_t>> few = decode_rows(10, 4);
  few.push_back({0, 200});
  few.push_back({1, 150});
  EXPECT_EQ(leading(batch_of(few)), 4);
  // Only decode rows: all of them; one row: it.
  EXPECT_EQ(leading(batch_of(decode_rows(0, 128))), 128);
  EXPECT_EQ(leading({7}), 1);
  // A batch that starts with a chunk: none.
  EXPECT_EQ(leading(batch_of({{3, 512}})), 0);
  EXPECT_EQ(leading(batch_of({{3, 2}, {4, 1}})), 0);
  // A one-row chunk at the end is a single row too (its sequence has no other row).
  std::vector<std::pair<int32_t, int64_t>> tail = decode_rows(0, 3);
  tail.push_back({9, 1});
  EXPECT_EQ(leading(batch_of(tail)), 4);
  // Decode rows, a chunk, more decode rows: the run stops at the chunk.
  std::vector<std::pair<int32_t, int64_t>> split = decode_rows(0, 2);
  split.push_back({5, 30});
  split.push_back({6, 1});
  EXPECT_EQ(leading(batch_of(split)), 2);
}

}  // namespace
}  // namespace mg
