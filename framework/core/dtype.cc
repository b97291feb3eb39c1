#include "framework/core/dtype.h"

#include <array>
#include <utility>

namespace mg {

namespace {
struct DTypeInfo {
  DType dtype;
  std::string_view name;
  size_t size;
  bool floating;
};

constexpr std::array<DTypeInfo, 12> kDTypes = {{
    {DType::kF32, "F32", 4, true},
    {DType::kF16, "F16", 2, true},
    {DType::kBF16, "BF16", 2, true},
    {DType::kF64, "F64", 8, true},
    {DType::kI64, "I64", 8, false},
    {DType::kI32, "I32", 4, false},
    {DType::kI16, "I16", 2, false},
    {DType::kI8, "I8", 1, false},
    {DType::kU8, "U8", 1, false},
    {DType::kBool, "BOOL", 1, false},
    {DType::kF8E4M3, "F8_E4M3", 1, true},
    {DType::kF8E5M2, "F8_E5M2", 1, true},
}};

const DTypeInfo& info(DType dtype) {
  return kDTypes[static_cast<size_t>(dtype)];
}
}  // namespace

size_t dtype_size(DType dtype) {
  return info(dtype).size;
}
std::string_view dtype_name(DType dtype) {
  return info(dtype).name;
}
bool is_floating(DType dtype) {
  return info(dtype).floating;
}

std::optional<DType> dtype_from_name(std::string_view name) {
  for (const DTypeInfo& i : kDTypes) {
    if (i.name == name) return i.dtype;
  }
  return std::nullopt;
}

}  // namespace mg
