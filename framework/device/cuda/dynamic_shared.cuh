// Opting a kernel in to more dynamic shared memory than the default (host side, nvcc only).
//
// A launch may take at most cudaFuncAttributeMaxDynamicSharedMemorySize bytes of dynamic shared
// memory, whose default is 48 KB minus the kernel's static shared memory, not 48 KB: a kernel with
// 6 KB of static arrays fails to launch (cudaErrorInvalidValue) at 44 KB of dynamic memory unless
// it opted in. The check therefore counts both. Setting the attribute is a host-side call, allowed
// while a stream is captured into a graph; it is made per launch that needs it (attributes belong
// to the current device's context, so a cached "done" would be wrong across devices).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <mutex>
#include <unordered_map>

#include "framework/device/cuda/cuda_check.h"

namespace mg::cuda {

// The kernel's static shared memory: a property of its code, read once per kernel and kept in a
// table.
inline size_t static_shared_bytes(const void* kernel) {
  static std::mutex mutex;
  static std::unordered_map<const void*, size_t> bytes;
  const std::lock_guard<std::mutex> lock(mutex);
  const auto it = bytes.find(kernel);
  if (it != bytes.end()) return it->second;
  cudaFuncAttributes attributes{};
  MG_CUDA_CHECK(cudaFuncGetAttributes(&attributes, kernel));
  bytes.emplace(kernel, attributes.sharedSizeBytes);
  return attributes.sharedSizeBytes;
}

// Opts `kernel` in to `dynamic_bytes` of dynamic shared memory where the default would refuse it.
template <typename... Args>
void opt_in_dynamic_shared(void (*kernel)(Args...), size_t dynamic_bytes) {
  if (dynamic_bytes == 0) return;
  const void* k = reinterpret_cast<const void*>(kernel);
  if (static_shared_bytes(k) + dynamic_bytes > 48 * 1024) {
    MG_CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(dynamic_bytes)));
  }
}

}  // namespace mg::cuda
