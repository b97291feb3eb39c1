// Overflow-checked size arithmetic: the one place where products and sums of sizes that a user
// controls (flags, graph params, file headers) are computed. A size that would wrap comes back as
// nullopt instead of a small number, so it can never turn into a short buffer that is then written
// past (issue 18: --max-seq-len 2^57 made a 64-byte KV cache).
//
// Limits (docs/bad_input.md lists them with the flags they bound):
//   kMaxAllocationBytes  one allocation, on any device: 1 TiB
//   kMaxSeqLen           KV-cache positions (--max-seq-len, info.max_seq_len): 2^31 - 1, since
//                        positions are int32 everywhere
//   kMaxTokensPerForward one forward chunk (--max-tokens): 2^24
// Host memory has one more bound, the machine's physical memory, checked against the bytes of
// all live host buffers together (framework/core/host_memory.h).
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>

#include "framework/core/dtype.h"
#include "framework/core/tensor.h"

namespace mg {

// Larger requests come from a typo or a hostile file, never from a model that fits today's
// machines; refusing them up front gives an error that names the flag instead of a failed (or,
// with overcommit, a half-successful) allocation.
inline constexpr size_t kMaxAllocationBytes = size_t{1} << 40;
inline constexpr int64_t kMaxSeqLen = std::numeric_limits<int32_t>::max();
inline constexpr int64_t kMaxTokensPerForward = int64_t{1} << 24;

// a * b and a + b, or nullopt when the exact result does not fit T.
template <std::integral T>
constexpr std::optional<T> checked_mul(T a, T b) {
  T out{};
  if (__builtin_mul_overflow(a, b, &out)) return std::nullopt;
  return out;
}
template <std::integral T>
constexpr std::optional<T> checked_add(T a, T b) {
  T out{};
  if (__builtin_add_overflow(a, b, &out)) return std::nullopt;
  return out;
}

// `bytes` rounded up to a multiple of `align` (> 0), or nullopt on overflow.
constexpr std::optional<size_t> checked_round_up(size_t bytes, size_t align) {
  const std::optional<size_t> padded = checked_add(bytes, align - 1);
  if (!padded) return std::nullopt;
  return *padded / align * align;
}

// Elements of `shape`; nullopt for a negative dimension or when the product of the non-zero
// dimensions overflows int64. Zero dimensions are skipped in the check because shape_numel()
// multiplies in order: a shape that passes can be multiplied out in any order without overflow.
inline std::optional<int64_t> checked_numel(const Shape& shape) {
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
  return empty ? 0 : numel;
}

// Bytes a tensor of `shape` and `dtype` holds; nullopt when checked_numel() fails or the byte
// count overflows size_t.
inline std::optional<size_t> checked_nbytes(const Shape& shape, DType dtype) {
  const std::optional<int64_t> numel = checked_numel(shape);
  if (!numel) return std::nullopt;
  return checked_mul(static_cast<size_t>(*numel), dtype_size(dtype));
}

// "512 B", "1.5 KiB", "1.0 TiB": sizes in messages.
std::string byte_size_str(uint64_t bytes);

// Bytes for a new tensor of `shape` and `dtype`: throws mg::Error starting with `what` when the
// shape is negative, overflows, or needs more than kMaxAllocationBytes.
size_t allocation_bytes(const Shape& shape, DType dtype, std::string_view what);

}  // namespace mg
