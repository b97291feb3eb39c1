// The free list of a paged KV cache's blocks (kv_batch.h): sequences take blocks as they grow
// and give them all back when they end. Not thread-safe (the Engine holds its lock).
#pragma once

#include <cstdint>
#include <vector>

#include "framework/core/error.h"

namespace mg {

class KvBlockPool {
 public:
  KvBlockPool(int64_t blocks, int64_t block_size) : total_(blocks), block_size_(block_size) {
    MG_CHECK(blocks >= 0 && block_size >= 1, "KV block pool of {} blocks of {} positions", blocks,
             block_size);
    free_.reserve(static_cast<size_t>(blocks));
    // Lowest ids on top of the stack: a lone sequence gets blocks 0, 1, 2, ...
    for (int64_t b = blocks - 1; b >= 0; --b) free_.push_back(static_cast<int32_t>(b));
  }

  int64_t total() const { return total_; }
  int64_t free() const { return static_cast<int64_t>(free_.size()); }
  int64_t block_size() const { return block_size_; }

  // Appends `n` free blocks to `table`. The caller reserved them (MG_ASSERT: a bug otherwise).
  void take(int64_t n, std::vector<int32_t>& table) {
    MG_ASSERT(n >= 0 && n <= free(), "KV block pool: {} blocks asked, {} free", n, free());
    for (int64_t i = 0; i < n; ++i) {
      table.push_back(free_.back());
      free_.pop_back();
    }
  }

  // Returns every block of `table` to the pool.
  void release(const std::vector<int32_t>& table) {
    for (int32_t b : table) {
      MG_ASSERT(b >= 0 && b < total_, "KV block pool: block {} is not of this pool", b);
      free_.push_back(b);
    }
    MG_ASSERT(free() <= total_, "KV block pool: {} free blocks of {}", free(), total_);
  }

 private:
  int64_t total_;
  int64_t block_size_;
  std::vector<int32_t> free_;
};

}  // namespace mg
