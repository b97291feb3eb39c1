// Checks shared by the dense nn ops (embedding, rms_norm, linear, rope, attention, gated_mlp) on
// top of op_helpers.h. Messages start with the op name; the caller adds file and node.
#pragma once

#include <cmath>
#include <optional>
#include <span>
#include <string_view>

#include "framework/core/error.h"
#include "ops/nn/op_helpers.h"

namespace mg {

// True when the optional input at `index` is present.
inline bool has_input(std::span<const std::optional<ValueType>> inputs, size_t index) {
  return index < inputs.size() && inputs[index].has_value();
}

// An optional input must be present exactly when its flag says so.
inline void expect_present_iff(std::span<const std::optional<ValueType>> inputs, size_t index,
                               bool flag, std::string_view op, std::string_view input,
                               std::string_view flag_name) {
  const bool present = has_input(inputs, index);
  MG_CHECK(present == flag, "{}: input {} ({}) is {} but {} is {}", op, index, input,
           present ? "present" : "absent", flag_name, flag ? "true" : "false");
}

// A [T] I32 activation (token ids, positions).
inline void expect_token_ids(const ValueType& type, std::string_view what) {
  MG_CHECK(type.dtype == DType::kI32 && type.shape == Shape{kTokens}, "{} must be I32[T], got {}",
           what, value_type_str(type));
}

// A [T, D] floating activation.
inline void expect_rows(const ValueType& type, std::string_view what) {
  expect_activation(type, what);
  expect_rank(type, 2, what);
}

// An optional multiplier param; unset means 1.
inline void expect_finite(double value, std::string_view op, std::string_view name) {
  MG_CHECK(std::isfinite(value), "{}: {} must be finite, got {}", op, name, value);
}

// The CPU kernel of a dense op (each op picks its CUDA kernel before calling this): the device
// must be the CPU, whose kernels read F32 activations (weights are converted to F32 by the
// place-weights pass).
inline void expect_cpu_kernel(const KernelContext& ctx, std::string_view op,
                              std::span<const size_t> float_activations) {
  MG_CHECK(ctx.options.device.is_cpu(), "op {} has no kernel for {}", op, ctx.options.device.str());
  for (size_t i : float_activations) {
    if (i >= ctx.input_types.size() || !ctx.input_types[i]) continue;
    MG_CHECK(ctx.input_types[i]->dtype == DType::kF32,
             "{}: the CPU kernel needs F32 activations, input {} is {}", op, i,
             value_type_str(*ctx.input_types[i]));
  }
}

}  // namespace mg
