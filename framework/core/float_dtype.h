// Host code over tensors of any float dtype: one visitor from a DType to the host element type,
// instead of a switch over F32/F16/BF16/F64 in every function that reads or writes such data.
// (The CUDA counterpart, with __half and __nv_bfloat16, is framework/device/cuda/dtype_dispatch.h.)
//
//   visit_float_dtype(t.dtype(), "weight", [&](auto tag) {
//     using T = decltype(tag);
//     const T* p = static_cast<const T*>(t.raw());
//     ... to_float(p[i]) ...
//   });
//
// The callable takes a value of the element type as a tag (not a template parameter) so the same
// pattern works in the C++17 CUDA sources.
#pragma once

#include <cstdint>
#include <string_view>

#include "framework/core/dtype.h"
#include "framework/core/error.h"
#include "framework/core/half.h"

namespace mg {

// Host storage of the 16-bit floats: the bits only, read and written through float.
struct BFloat16 {
  uint16_t bits = 0;
};
struct Float16 {
  uint16_t bits = 0;
};
static_assert(sizeof(BFloat16) == 2 && sizeof(Float16) == 2);

inline float to_float(float x) {
  return x;
}
inline float to_float(double x) {
  return static_cast<float>(x);
}
inline float to_float(BFloat16 x) {
  return bf16_to_float(x.bits);
}
inline float to_float(Float16 x) {
  return fp16_to_float(x.bits);
}

// Rounds to nearest even for the narrower types.
template <typename T>
T from_float(float x);
template <>
inline float from_float<float>(float x) {
  return x;
}
template <>
inline double from_float<double>(float x) {
  return x;
}
template <>
inline BFloat16 from_float<BFloat16>(float x) {
  return BFloat16{float_to_bf16(x)};
}
template <>
inline Float16 from_float<Float16>(float x) {
  return Float16{float_to_fp16(x)};
}

// Calls fn(T{}) with T = float, Float16, BFloat16 or double for F32, F16, BF16 or F64 and returns
// what it returns. Any other dtype throws mg::Error "<what> must be F32, F16, BF16 or F64, got
// I32".
template <typename Fn>
decltype(auto) visit_float_dtype(DType dtype, std::string_view what, Fn&& fn) {
  switch (dtype) {
    case DType::kF32:
      return fn(float{});
    case DType::kF16:
      return fn(Float16{});
    case DType::kBF16:
      return fn(BFloat16{});
    case DType::kF64:
      return fn(double{});
    case DType::kI64:
    case DType::kI32:
    case DType::kI16:
    case DType::kI8:
    case DType::kU8:
    case DType::kBool:
    case DType::kF8E4M3:
    case DType::kF8E5M2:
      break;
  }
  MG_FAIL("{} must be F32, F16, BF16 or F64, got {}", what, dtype_name(dtype));
}

}  // namespace mg
