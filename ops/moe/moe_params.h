// The "moe" graph node: its positional inputs, and the checks that turn proto::MoEParams plus
// the input types into a validated MoEConfig. Every error names the field or input and says
// what was expected; the caller prefixes the file and node name.
#pragma once

#include <cstddef>
#include <optional>
#include <span>

#include "framework/op/op_registry.h"
#include "ops/moe/config.h"
#include "proto/model.pb.h"

namespace mg {

// Positions of the node inputs (documented with their shapes in proto/model.proto, MoEParams).
namespace moe_input {
inline constexpr size_t kX = 0;
inline constexpr size_t kRouterWeight = 1;
inline constexpr size_t kRouterBias = 2;
inline constexpr size_t kScoreCorrectionBias = 3;
inline constexpr size_t kW13 = 4;
inline constexpr size_t kW13Bias = 5;
inline constexpr size_t kW2 = 6;
inline constexpr size_t kW2Bias = 7;
inline constexpr size_t kSharedGate = 8;
inline constexpr size_t kSharedUp = 9;
inline constexpr size_t kSharedDown = 10;
inline constexpr size_t kSharedExpertGate = 11;
inline constexpr size_t kCount = 12;
}  // namespace moe_input

// The input list of op "moe". Expert weights (w13, w2 and their biases) are kRaw: the oracle
// converts them for the chosen backend; the router and shared-expert weights are kCompute.
std::span<const InputSpec> moe_input_specs();

// Parses and validates the parameters (enums set, grouped-only fields only with grouped
// routing, SWIGLU_OAI-only fields only with it, ...). Any quant scheme parses; whether it runs
// is the oracle's question.
MoEConfig moe_config_from_params(const proto::MoEParams& params);

// Checks that each input is present exactly when the config uses it and has the expected
// shape and a floating dtype ("input 4 (w13) must have shape [8, 64, 32], got F32[8, 32, 64]").
void check_moe_inputs(const MoEConfig& config, std::span<const std::optional<ValueType>> inputs);

}  // namespace mg
