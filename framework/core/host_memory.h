// Host memory for tensors and CPU device buffers, with the limits of issue 18: one allocation is
// at most kMaxAllocationBytes (framework/core/checked_math.h), and the live buffers together stay
// within the machine's physical memory, so an oversized KV cache or arena is refused with a
// message instead of being swapped or OOM-killed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>

#include "framework/core/tensor.h"

namespace mg {

// Zeroed, 64-byte aligned host memory of `bytes` bytes (plus 64 readable bytes of slack). Throws
// mg::Error starting with `what` when `bytes` is beyond kMaxAllocationBytes, when the live buffers
// together would pass host_memory_bytes(), or when the system refuses (an address-space limit,
// memory in use by other programs).
std::shared_ptr<Buffer> allocate_host_buffer(size_t bytes, std::string_view what);

// The machine's physical memory in bytes (0 when the OS does not say).
uint64_t host_memory_bytes();

}  // namespace mg
