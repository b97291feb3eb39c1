// Carves typed arrays out of one scratch block handed in by the caller (the plan's workspace).
//
// Every stage that needs scratch writes one carve function and calls it twice: on a sizing
// Workspace (null base) from workspace_bytes(), and on the real block from apply(). Both walk
// the same code, so the size asked for and the layout used cannot disagree, and nothing is
// allocated while a forward runs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>

#include "framework/core/error.h"

namespace mg {

class Workspace {
 public:
  // Counts bytes only; take() returns null.
  static Workspace sizing() { return Workspace(nullptr, std::numeric_limits<size_t>::max()); }
  Workspace(void* base, size_t bytes) : base_(static_cast<char*>(base)), capacity_(bytes) {}

  bool is_sizing() const { return base_ == nullptr; }
  size_t used() const { return used_; }

  // `count` elements of T at a 256-byte aligned offset. Throws mg::InternalError when the block
  // is too small (a workspace_bytes() that undercounted).
  template <typename T>
  T* take(int64_t count) {
    MG_ASSERT(count >= 0, "workspace take of {} elements", count);
    const size_t offset = (used_ + kAlign - 1) / kAlign * kAlign;
    const size_t bytes = static_cast<size_t>(count) * sizeof(T);
    used_ = offset + bytes;
    if (is_sizing()) return nullptr;
    MG_ASSERT(used_ <= capacity_, "workspace of {} bytes is too small (needs at least {})",
              capacity_, used_);
    return reinterpret_cast<T*>(base_ + offset);
  }

  // Bytes a sizing pass counted, rounded up so that consecutive carves stay aligned.
  size_t bytes() const { return (used_ + kAlign - 1) / kAlign * kAlign; }

 private:
  // cuBLASLt rejects a workspace pointer that is not 256-byte aligned
  // (CUBLAS_STATUS_INVALID_VALUE), and the MoE carves cuBLAS workspaces from this block.
  static constexpr size_t kAlign = 256;
  char* base_;
  size_t capacity_;
  size_t used_ = 0;
};

}  // namespace mg
