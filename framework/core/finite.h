// Finding NaN and infinity in raw buffers of any float dtype, by their bits (no conversion).
#pragma once

#include <cstdint>

#include "framework/core/dtype.h"

namespace mg {

// Index of the first NaN or infinity among `count` elements of `dtype` at `data` (float dtypes:
// F32, F64, F16, BF16, F8E4M3 (NaN only: it has no infinity), F8E5M2), or -1 when all are finite
// or the dtype is an integer type.
int64_t find_non_finite(const void* data, int64_t count, DType dtype);

}  // namespace mg
