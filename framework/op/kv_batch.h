// Where the rows of one forward keep their keys and values: the paged KV cache of attention
// states. Plain data (no framework types) so CUDA launchers can take it by value.
#pragma once

#include <cstdint>

namespace mg {

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
};

}  // namespace mg
