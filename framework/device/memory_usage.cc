#include "framework/device/memory_usage.h"

#include <unistd.h>

#include <fstream>

#ifdef MG_WITH_CUDA
#include <cuda_runtime_api.h>

#include "framework/device/allocator.h"
#include "framework/device/cuda/cuda_check.h"
#endif

namespace mg {

MemoryUsage memory_usage(Device device) {
  MemoryUsage m;
  std::ifstream statm("/proc/self/statm");
  int64_t size_pages = 0, resident_pages = 0;
  if (statm >> size_pages >> resident_pages) {
    m.host_rss_bytes = resident_pages * static_cast<int64_t>(sysconf(_SC_PAGESIZE));
  }
#ifdef MG_WITH_CUDA
  if (device.is_cuda()) {
    DeviceScope scope(device);
    size_t free = 0, total = 0;
    MG_CUDA_CHECK(cudaMemGetInfo(&free, &total));
    m.device_used_bytes = static_cast<int64_t>(total - free);
  }
#else
  (void)device;
#endif
  return m;
}

}  // namespace mg
