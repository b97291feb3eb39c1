#include "framework/core/host_memory.h"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "framework/core/checked_math.h"
#include "framework/core/error.h"

namespace mg {

namespace {
// Bytes of all live buffers from allocate_host_buffer, across threads (ranks share a process).
std::atomic<uint64_t> live_host_bytes{0};
}  // namespace

std::shared_ptr<Buffer> allocate_host_buffer(size_t bytes, std::string_view what) {
  MG_CHECK(bytes <= kMaxAllocationBytes, "{}: {} is more than the {} one allocation may take", what,
           byte_size_str(bytes), byte_size_str(kMaxAllocationBytes));
  // 64 bytes of slack past the end: vector loads may read a little past the last element.
  // Cannot overflow: bytes <= kMaxAllocationBytes.
  const size_t padded = *checked_round_up(bytes, 64) + 64;
  const uint64_t limit = host_memory_bytes();
  const uint64_t before = live_host_bytes.fetch_add(padded);
  if (limit > 0 && before + padded > limit) {
    live_host_bytes.fetch_sub(padded);
    MG_FAIL("{}: {} more would pass this machine's {} of memory ({} already held)", what,
            byte_size_str(padded), byte_size_str(limit), byte_size_str(before));
  }
  void* p = std::aligned_alloc(64, padded);
  if (p == nullptr) {
    live_host_bytes.fetch_sub(padded);
    MG_FAIL("{}: out of host memory: the system refused {} ({} already held; check ulimit -v)",
            what, byte_size_str(padded), byte_size_str(before));
  }
  std::memset(p, 0, padded);
  std::shared_ptr<void> owner(p, [padded](void* q) {
    std::free(q);
    live_host_bytes.fetch_sub(padded);
  });
  return std::make_shared<Buffer>(p, bytes, Device::cpu(), std::move(owner));
}

uint64_t host_memory_bytes() {
  static const uint64_t bytes = [] {
    const long pages = sysconf(_SC_PHYS_PAGES);
    const long page_size = sysconf(_SC_PAGE_SIZE);
    if (pages <= 0 || page_size <= 0) return uint64_t{0};
    return checked_mul(static_cast<uint64_t>(pages), static_cast<uint64_t>(page_size))
        .value_or(std::numeric_limits<uint64_t>::max());
  }();
  return bytes;
}

}  // namespace mg
