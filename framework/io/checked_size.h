// Overflow-checked tensor sizes for shapes read from untrusted files.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "framework/core/dtype.h"
#include "framework/core/tensor.h"

namespace mg {

// Bytes a tensor of `shape` and `dtype` holds; nullopt for a negative dimension, or when the
// product of the non-zero dimensions overflows int64 or the byte count overflows size_t. Zero
// dimensions are skipped in the check because shape_numel() multiplies in order: a shape that
// passes can be multiplied out anywhere without overflow.
inline std::optional<size_t> checked_nbytes(const Shape& shape, DType dtype) {
  int64_t numel = 1;
  bool empty = false;
  for (int64_t d : shape) {
    if (d < 0) return std::nullopt;
    if (d == 0) {
      empty = true;
      continue;
    }
    if (__builtin_mul_overflow(numel, d, &numel)) return std::nullopt;
  }
  size_t bytes = 0;
  if (__builtin_mul_overflow(static_cast<size_t>(numel), dtype_size(dtype), &bytes)) {
    return std::nullopt;
  }
  return empty ? 0 : bytes;
}

}  // namespace mg
