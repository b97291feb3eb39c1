// Deterministic random device buffers for benchmarks: values uniform in
// [center - scale, center + scale) from a counter-based hash of (seed, index), so a buffer of any
// size fills in one launch on the GPU (host-side generation of a 22 GB expert layer would take
// minutes). framework/device/random_fill.h is the device-generic entry (same values on the host).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "framework/core/dtype.h"

namespace mg::cuda {

// data [n] of `dtype` (F32, F16 or BF16).
void fill_uniform(void* data, int64_t n, DType dtype, uint64_t seed, float center, float scale,
                  cudaStream_t stream);

}  // namespace mg::cuda
