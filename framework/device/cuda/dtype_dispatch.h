// Host-side dispatch from a DType to the CUDA element type a templated launcher is instantiated
// for. Used by the thin op adapters (ops/nn/*/*_cuda_kernel.cc).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <string_view>

#include "framework/core/dtype.h"
#include "framework/core/error.h"

namespace mg::cuda {

// True for the element types the CUDA kernels are instantiated for: F32, F16, BF16.
inline bool is_cuda_float(DType dtype) {
  return dtype == DType::kF32 || dtype == DType::kF16 || dtype == DType::kBF16;
}

// Calls fn(T{}) with T = float, __half or __nv_bfloat16 for F32, F16 or BF16.
template <typename Fn>
void dispatch_float_dtype(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::kF32:
      fn(float{});
      return;
    case DType::kF16:
      fn(__half{});
      return;
    case DType::kBF16:
      fn(__nv_bfloat16{});
      return;
    case DType::kF64:
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
  MG_ASSERT(false, "CUDA kernels are built for F32, F16 and BF16, not {}", dtype_name(dtype));
}

// Calls fn(T{}) with T = __half or __nv_bfloat16 for F16 or BF16: for kernels built for 16-bit
// activations only (the FP8 GEMMs), whose backends refuse F32 in their checks; `what` names the
// caller in the assertion.
template <typename Fn>
void dispatch_16bit_dtype(DType dtype, std::string_view what, Fn&& fn) {
  MG_ASSERT(dtype == DType::kBF16 || dtype == DType::kF16, "{} built for activation dtype {}", what,
            dtype_name(dtype));
  if (dtype == DType::kBF16) {
    fn(__nv_bfloat16{});
  } else {
    fn(__half{});
  }
}

}  // namespace mg::cuda
