// Small helpers shared by op definitions: parameter access and input type checks that produce
// clear messages. The caller (shape inference) prefixes the file and node name.
#pragma once

#include <optional>
#include <span>
#include <string_view>

#include "framework/op/op_registry.h"

namespace mg {

// The input at `index`; throws mg::Error naming it if it is absent.
const ValueType& require_input(std::span<const std::optional<ValueType>> inputs, size_t index,
                               std::string_view what);

// Throws mg::Error unless `type` has rank `rank`.
void expect_rank(const ValueType& type, size_t rank, std::string_view what);
// Throws mg::Error unless `type.shape == shape` (kTokens matches kTokens only).
void expect_shape(const ValueType& type, const Shape& shape, std::string_view what);
// Throws mg::Error unless `type` is an activation [T, ...] of a floating dtype.
void expect_activation(const ValueType& type, std::string_view what);
// Throws mg::Error unless `type.dtype` is floating (F32, F16, BF16, F64).
void expect_float(const ValueType& type, std::string_view what);

}  // namespace mg
