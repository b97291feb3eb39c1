// CUDA concat_heads kernel (included by the per-dtype concat_heads_cuda_<dtype>.cu files).
//
// A copy that moves "units" of 16, 8 or 4 bytes: the widest that divides both head widths in
// bytes and to which a, b and out are all aligned, else single elements (e.g. odd head dims in
// 16-bit dtypes). DeepSeek-V3's k = [k_nope 128, k_rope 64] in BF16 moves 16-byte units. Units are
// numbered in output order, so the stores of a warp are contiguous and its loads come from short
// spans of a and b.
#pragma once

#include <cstdint>

#include "framework/device/cuda/cuda_check.h"
#include "framework/device/cuda/cuda_utils.cuh"
#include "ops/nn/concat_heads/concat_heads_cuda.h"

namespace mg::cuda {

// a [rows, a_units], b [rows or rows / heads, b_units] -> out [rows, a_units + b_units] where
// rows = tokens * heads; `shared_b`: b holds one head per token.
template <typename U>
__global__ void concat_heads_kernel(const U* a, const U* b, U* out, int64_t units, int64_t heads,
                                    int64_t a_units, int64_t b_units, bool shared_b) {
  const int64_t head_units = a_units + b_units;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < units;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = i / head_units;  // token * heads + head
    const int64_t j = i - row * head_units;
    if (j < a_units) {
      out[i] = a[row * a_units + j];
    } else {
      const int64_t b_row = shared_b ? row / heads : row;
      out[i] = b[b_row * b_units + (j - a_units)];
    }
  }
}

// True when units of `unit_bytes` tile both head widths and a, b and out are aligned to them.
inline bool concat_heads_units_fit(const ConcatHeadsArgs& args, int64_t elem_bytes,
                                   int64_t unit_bytes) {
  const auto aligned = [&](const void* p) {
    return reinterpret_cast<uintptr_t>(p) % static_cast<uintptr_t>(unit_bytes) == 0;
  };
  return (args.a_dim * elem_bytes) % unit_bytes == 0 &&
         (args.b_dim * elem_bytes) % unit_bytes == 0 && aligned(args.a) && aligned(args.b) &&
         aligned(args.out);
}

// The copy in units of U, each `elems` elements of the dtype.
template <typename U>
void launch_concat_heads_in(const ConcatHeadsArgs& args, int64_t elems, cudaStream_t stream) {
  const int64_t a_units = args.a_dim / elems;
  const int64_t b_units = args.b_dim / elems;
  const int64_t units = args.tokens * args.heads * (a_units + b_units);
  constexpr int kThreads = 256;
  concat_heads_kernel<U><<<grid_stride_blocks(units, kThreads), kThreads, 0, stream>>>(
      static_cast<const U*>(args.a), static_cast<const U*>(args.b), static_cast<U*>(args.out),
      units, args.heads, a_units, b_units, args.b_heads == 1);
  MG_CUDA_CHECK_LAUNCH();
}

template <typename T>
void launch_concat_heads(const ConcatHeadsArgs& args, cudaStream_t stream) {
  if (args.tokens <= 0) return;
  constexpr int64_t kElem = sizeof(T);
  if (concat_heads_units_fit(args, kElem, 16)) {
    launch_concat_heads_in<uint4>(args, 16 / kElem, stream);
  } else if (concat_heads_units_fit(args, kElem, 8)) {
    launch_concat_heads_in<uint2>(args, 8 / kElem, stream);
  } else if (concat_heads_units_fit(args, kElem, 4)) {
    launch_concat_heads_in<uint32_t>(args, 4 / kElem, stream);
  } else {
    launch_concat_heads_in<T>(args, 1, stream);
  }
}

}  // namespace mg::cuda
