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

#include "framework/device/cuda/cuda_check.h"

namespace mg::cuda {

template <auto kKernel>
void opt_in_dynamic_shared(size_t dynamic_bytes) {
  // The kernel's static shared memory is a property of its code: read once.
  static const size_t static_bytes = [] {
    cudaFuncAttributes attributes{};
    MG_CUDA_CHECK(cudaFuncGetAttributes(&attributes, kKernel));
    return attributes.sharedSizeBytes;
  }();
  if (static_bytes + dynamic_bytes > 48 * 1024) {
    MG_CUDA_CHECK(cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(dynamic_bytes)));
  }
}

}  // namespace mg::cuda
