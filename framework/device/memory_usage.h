// How much memory this process holds, for leak checks (`moegraph bench soak`, the soak tests).
#pragma once

#include <cstdint>
#include <optional>

#include "framework/device/device.h"

namespace mg {

struct MemoryUsage {
  // Resident set size from /proc/self/statm (0 where /proc is not there).
  int64_t host_rss_bytes = 0;
  // total - free of `device` from cudaMemGetInfo: every process's allocations on the GPU, this
  // one's caching allocator pool included. Unset for the CPU.
  std::optional<int64_t> device_used_bytes;
};

MemoryUsage memory_usage(Device device);

}  // namespace mg
