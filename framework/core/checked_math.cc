#include "framework/core/checked_math.h"

#include "framework/core/error.h"

namespace mg {

std::string byte_size_str(uint64_t bytes) {
  if (bytes < 1024) return fmt::format("{} B", bytes);
  static constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double value = static_cast<double>(bytes) / 1024.0;
  int unit = 0;
  while (value >= 1024.0 && unit < 5) {
    value /= 1024.0;
    ++unit;
  }
  return fmt::format("{:.1f} {}", value, kUnits[unit]);
}

size_t allocation_bytes(const Shape& shape, DType dtype, std::string_view what) {
  const std::optional<size_t> bytes = checked_nbytes(shape, dtype);
  MG_CHECK(bytes.has_value(), "{}: {}{} has a negative dimension or more bytes than 64 bits count",
           what, dtype_name(dtype), shape_str(shape));
  MG_CHECK(*bytes <= kMaxAllocationBytes,
           "{}: {}{} needs {}, more than the {} one allocation may take", what, dtype_name(dtype),
           shape_str(shape), byte_size_str(*bytes), byte_size_str(kMaxAllocationBytes));
  return *bytes;
}

}  // namespace mg
