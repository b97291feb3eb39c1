// Deterministic random tensors for benchmarks and random-weight models: element i of a tensor
// filled with `seed` is uniform_at(seed, i, center, scale) (random_uniform.h), the same value on
// the host and on a GPU, and a buffer of any size fills in parallel (one launch on a GPU).
#pragma once

#include <cstdint>

#include "framework/core/tensor.h"
#include "framework/device/random_uniform.h"
#include "framework/device/stream.h"

namespace mg {

// Fills `t` (F32, F16 or BF16, on any device; rounded to nearest even); queued on `stream` on
// GPUs, done on return with a null stream.
void fill_uniform(const Tensor& t, uint64_t seed, float center, float scale, Stream* stream);

}  // namespace mg
