#include "ops/nn/op_helpers.h"

namespace mg {

namespace {
std::string shape_text(const Shape& shape) {
  return value_type_str({DType::kF32, shape}).substr(3);
}
}  // namespace

const ValueType& require_input(std::span<const std::optional<ValueType>> inputs, size_t index,
                               std::string_view what) {
  MG_CHECK(index < inputs.size() && inputs[index].has_value(), "input {} ({}) is missing", index,
           what);
  return *inputs[index];
}

void expect_rank(const ValueType& type, size_t rank, std::string_view what) {
  MG_CHECK(type.shape.size() == rank, "{} must have rank {}, got {}", what, rank,
           value_type_str(type));
}

void expect_shape(const ValueType& type, const Shape& shape, std::string_view what) {
  MG_CHECK(type.shape == shape, "{} must have shape {}, got {}", what, shape_text(shape),
           value_type_str(type));
}

void expect_float(const ValueType& type, std::string_view what) {
  MG_CHECK(is_floating(type.dtype) && type.dtype != DType::kF8E4M3 && type.dtype != DType::kF8E5M2,
           "{} must be F32, F16, BF16 or F64, got {}", what, value_type_str(type));
}

void expect_activation(const ValueType& type, std::string_view what) {
  MG_CHECK(!type.shape.empty() && type.shape[0] == kTokens,
           "{} must be an activation with a leading token dimension, got {}", what,
           value_type_str(type));
  expect_float(type, what);
}

}  // namespace mg
