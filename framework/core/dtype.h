// Element types and their sizes. Names follow safetensors ("F32", "BF16", ...).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace mg {

enum class DType : uint8_t {
  kF32,
  kF16,
  kBF16,
  kF64,
  kI64,
  kI32,
  kI16,
  kI8,
  kU8,
  kBool,
  kF8E4M3,
  kF8E5M2,
};

// Bytes per element.
size_t dtype_size(DType dtype);
// "F32", "BF16", ...
std::string_view dtype_name(DType dtype);
// Inverse of dtype_name; nullopt for unknown names.
std::optional<DType> dtype_from_name(std::string_view name);
bool is_floating(DType dtype);

// C++ type → DType, for typed accessors.
template <typename T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() {
  return DType::kF32;
}
template <>
constexpr DType dtype_of<double>() {
  return DType::kF64;
}
template <>
constexpr DType dtype_of<int32_t>() {
  return DType::kI32;
}
template <>
constexpr DType dtype_of<int64_t>() {
  return DType::kI64;
}
template <>
constexpr DType dtype_of<uint8_t>() {
  return DType::kU8;
}
template <>
constexpr DType dtype_of<int8_t>() {
  return DType::kI8;
}

}  // namespace mg
