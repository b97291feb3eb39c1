#include "framework/core/finite.h"

#include <cstring>

namespace mg {

namespace {

// Index of the first element whose bits cover `mask` fully (an all-ones exponent: NaN
// or infinity), or -1.
template <typename Bits>
int64_t first_all_ones(const void* data, int64_t count, Bits mask) {
  const auto* bytes = static_cast<const unsigned char*>(data);
  for (int64_t i = 0; i < count; ++i) {
    Bits bits;
    std::memcpy(&bits, bytes + i * static_cast<int64_t>(sizeof(Bits)), sizeof(Bits));
    if ((bits & mask) == mask) return i;
  }
  return -1;
}

}  // namespace

int64_t find_non_finite(const void* data, int64_t count, DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return first_all_ones<uint32_t>(data, count, 0x7f800000u);
    case DType::kF64:
      return first_all_ones<uint64_t>(data, count, 0x7ff0000000000000ull);
    case DType::kF16:
      return first_all_ones<uint16_t>(data, count, 0x7c00u);
    case DType::kBF16:
      return first_all_ones<uint16_t>(data, count, 0x7f80u);
    case DType::kF8E4M3:  // the "fn" variant: S.1111.111 is NaN, there is no infinity
      return first_all_ones<uint8_t>(data, count, 0x7fu);
    case DType::kF8E5M2:
      return first_all_ones<uint8_t>(data, count, 0x7cu);
    case DType::kI64:
    case DType::kI32:
    case DType::kI16:
    case DType::kI8:
    case DType::kU8:
    case DType::kBool:
      return -1;
  }
  return -1;
}

}  // namespace mg
