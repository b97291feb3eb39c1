#include "ops/moe/moe_params.h"

#include <iterator>
#include <string>

#include "ops/nn/op_helpers.h"

namespace mg {

namespace {

constexpr InputSpec kInputs[] = {
    {"x"},
    {"router_weight", InputKind::kWeight},
    // Raw, converted to F32 by the op: router logits are computed in F32 on every device (a BF16
    // logit or bias would change which experts win close selections).
    {"router_bias", InputKind::kWeight, true, WeightPlacement::kRaw},
    {"score_correction_bias", InputKind::kWeight, true, WeightPlacement::kRaw},
    // Expert weights: taken quantized as stored; the oracle module of the node's quant scheme
    // converts them for its backend.
    {"w13", InputKind::kWeight, false, WeightPlacement::kRaw, /*takes_quantized=*/true,
     /*random_codes_on_device=*/true},
    {"w13_bias", InputKind::kWeight, true, WeightPlacement::kRaw},
    {"w2", InputKind::kWeight, false, WeightPlacement::kRaw, /*takes_quantized=*/true,
     /*random_codes_on_device=*/true},
    {"w2_bias", InputKind::kWeight, true, WeightPlacement::kRaw},
    {"shared_gate", InputKind::kWeight, true},
    {"shared_up", InputKind::kWeight, true},
    {"shared_down", InputKind::kWeight, true},
    {"shared_expert_gate", InputKind::kWeight, true},
};
static_assert(std::size(kInputs) == moe_input::kCount);

std::optional<MoEActivation> activation_from_proto(proto::Activation a) {
  switch (a) {
    case proto::ACTIVATION_UNSPECIFIED:
      return std::nullopt;
    case proto::SILU_GATED:
      return MoEActivation::kSiluGated;
    case proto::GELU_GATED:
      return MoEActivation::kGeluGated;
    case proto::GELU_TANH_GATED:
      return MoEActivation::kGeluTanhGated;
    case proto::SWIGLU_OAI:
      return MoEActivation::kSwigluOai;
    case proto::RELU_SQUARED:
      return MoEActivation::kReluSquared;
    case proto::SILU:
      return MoEActivation::kSilu;
    case proto::GELU:
      return MoEActivation::kGelu;
    case proto::Activation_INT_MIN_SENTINEL_DO_NOT_USE_:
    case proto::Activation_INT_MAX_SENTINEL_DO_NOT_USE_:
      break;
  }
  MG_FAIL("unknown activation value {}", static_cast<int>(a));
}

RoutingMethod routing_method_from_proto(proto::MoERoutingMethod m) {
  switch (m) {
    case proto::MOE_ROUTING_UNSPECIFIED:
      MG_FAIL(
          "routing.method must be set (SOFTMAX_TOPK, SIGMOID_TOPK, TOPK_SOFTMAX, "
          "GROUPED_TOPK or LLAMA4_TOP1_SIGMOID)");
    case proto::SOFTMAX_TOPK:
      return RoutingMethod::kSoftmaxTopK;
    case proto::SIGMOID_TOPK:
      return RoutingMethod::kSigmoidTopK;
    case proto::TOPK_SOFTMAX:
      return RoutingMethod::kTopKSoftmax;
    case proto::GROUPED_TOPK:
      return RoutingMethod::kGroupedTopK;
    case proto::LLAMA4_TOP1_SIGMOID:
      return RoutingMethod::kLlama4Top1Sigmoid;
    case proto::MoERoutingMethod_INT_MIN_SENTINEL_DO_NOT_USE_:
    case proto::MoERoutingMethod_INT_MAX_SENTINEL_DO_NOT_USE_:
      break;
  }
  MG_FAIL("unknown routing.method value {}", static_cast<int>(m));
}

std::optional<ScoreFunction> score_function_from_proto(proto::MoEScoreFunction f) {
  switch (f) {
    case proto::MOE_SCORE_UNSPECIFIED:
      return std::nullopt;
    case proto::MOE_SCORE_SOFTMAX:
      return ScoreFunction::kSoftmax;
    case proto::MOE_SCORE_SIGMOID:
      return ScoreFunction::kSigmoid;
    case proto::MoEScoreFunction_INT_MIN_SENTINEL_DO_NOT_USE_:
    case proto::MoEScoreFunction_INT_MAX_SENTINEL_DO_NOT_USE_:
      break;
  }
  MG_FAIL("unknown routing.score_function value {}", static_cast<int>(f));
}

std::optional<GroupScore> group_score_from_proto(proto::MoEGroupScore g) {
  switch (g) {
    case proto::MOE_GROUP_SCORE_UNSPECIFIED:
      return std::nullopt;
    case proto::MOE_GROUP_MAX:
      return GroupScore::kMax;
    case proto::MOE_GROUP_SUM_TOP2:
      return GroupScore::kSumTop2;
    case proto::MoEGroupScore_INT_MIN_SENTINEL_DO_NOT_USE_:
    case proto::MoEGroupScore_INT_MAX_SENTINEL_DO_NOT_USE_:
      break;
  }
  MG_FAIL("unknown routing.group_score value {}", static_cast<int>(g));
}

QuantScheme quant_scheme_from_proto(proto::MoEQuantScheme q) {
  switch (q) {
    case proto::MOE_QUANT_UNQUANTIZED:
      return QuantScheme::kUnquantized;
    case proto::MOE_QUANT_FP8_PER_TENSOR:
      return QuantScheme::kFp8PerTensor;
    case proto::MOE_QUANT_FP8_BLOCK:
      return QuantScheme::kFp8Block;
    case proto::MOE_QUANT_FP8_PER_CHANNEL:
      return QuantScheme::kFp8PerChannel;
    case proto::MOE_QUANT_INT8_WEIGHT_ONLY:
      return QuantScheme::kInt8WeightOnly;
    case proto::MOE_QUANT_INT4_WEIGHT_ONLY:
      return QuantScheme::kInt4WeightOnly;
    case proto::MOE_QUANT_MXFP4:
      return QuantScheme::kMxfp4;
    case proto::MOE_QUANT_NVFP4:
      return QuantScheme::kNvfp4;
    case proto::MoEQuantScheme_INT_MIN_SENTINEL_DO_NOT_USE_:
    case proto::MoEQuantScheme_INT_MAX_SENTINEL_DO_NOT_USE_:
      break;
  }
  MG_FAIL("unknown quant_scheme value {}", static_cast<int>(q));
}

ExpertLayout layout_from_proto(proto::MoEExpertLayout l) {
  switch (l) {
    case proto::MOE_LAYOUT_CANONICAL:
      return ExpertLayout::kCanonical;
    case proto::MOE_LAYOUT_TRANSPOSED:
      return ExpertLayout::kTransposed;
    case proto::MoEExpertLayout_INT_MIN_SENTINEL_DO_NOT_USE_:
    case proto::MoEExpertLayout_INT_MAX_SENTINEL_DO_NOT_USE_:
      break;
  }
  MG_FAIL("unknown expert_layout value {}", static_cast<int>(l));
}

RoutingConfig routing_from_proto(const proto::MoEParams& p) {
  const proto::MoERoutingParams& r = p.routing();
  RoutingConfig c;
  c.method = routing_method_from_proto(r.method());
  c.num_experts = p.num_experts();
  c.top_k = p.top_k();
  c.renormalize = r.renormalize();
  c.has_router_bias = r.has_router_bias();
  c.has_score_correction_bias = r.has_score_correction_bias();
  c.routed_scaling_factor = r.has_routed_scaling_factor() ? r.routed_scaling_factor() : 1.0f;
  const std::optional<ScoreFunction> score = score_function_from_proto(r.score_function());
  const std::optional<GroupScore> group_score = group_score_from_proto(r.group_score());
  if (c.method == RoutingMethod::kGroupedTopK) {
    MG_CHECK(score.has_value(),
             "routing.score_function must be set for GROUPED_TOPK "
             "(MOE_SCORE_SOFTMAX or MOE_SCORE_SIGMOID)");
    MG_CHECK(group_score.has_value(),
             "routing.group_score must be set for GROUPED_TOPK (MOE_GROUP_MAX or "
             "MOE_GROUP_SUM_TOP2)");
    MG_CHECK(r.num_groups() >= 1, "routing.num_groups must be >= 1 for GROUPED_TOPK, got {}",
             r.num_groups());
    MG_CHECK(r.groups_kept() >= 1, "routing.groups_kept must be >= 1 for GROUPED_TOPK, got {}",
             r.groups_kept());
    c.score_function = *score;
    c.group_score = *group_score;
    c.num_groups = r.num_groups();
    c.groups_kept = r.groups_kept();
  } else {
    const std::string_view name = routing_method_name(c.method);
    MG_CHECK(!score.has_value(),
             "routing.score_function is only used by GROUPED_TOPK ({} "
             "implies its own)",
             name);
    MG_CHECK(!group_score.has_value() && r.num_groups() == 0 && r.groups_kept() == 0,
             "routing.num_groups / groups_kept / group_score are only used by GROUPED_TOPK, not "
             "{}",
             name);
  }
  return c;
}

}  // namespace

std::span<const InputSpec> moe_input_specs() {
  return kInputs;
}

MoEConfig moe_config_from_params(const proto::MoEParams& p) {
  MoEConfig::Fields f;
  f.routing = routing_from_proto(p);
  f.hidden_size = p.hidden_size();
  f.intermediate_size = p.intermediate_size();
  const std::optional<MoEActivation> act = activation_from_proto(p.activation());
  MG_CHECK(act.has_value(),
           "activation must be set (SILU_GATED, GELU_GATED, GELU_TANH_GATED, "
           "SWIGLU_OAI, RELU_SQUARED, SILU or GELU)");
  f.activation.kind = *act;
  if (*act == MoEActivation::kSwigluOai) {
    if (p.has_swiglu_alpha()) f.activation.swiglu_alpha = p.swiglu_alpha();
    if (p.has_swiglu_limit()) f.activation.swiglu_limit = p.swiglu_limit();
  } else {
    MG_CHECK(!p.has_swiglu_alpha() && !p.has_swiglu_limit(),
             "swiglu_alpha / swiglu_limit are only used by SWIGLU_OAI, not {}",
             activation_name(*act));
  }
  f.layout = layout_from_proto(p.expert_layout());
  f.gate_up_interleaved = p.gate_up_interleaved();
  f.has_w13_bias = p.has_w13_bias();
  f.has_w2_bias = p.has_w2_bias();
  const proto::MoESharedExpertParams& s = p.shared();
  MG_CHECK(s.intermediate_size() >= 0, "shared.intermediate_size must be >= 0, got {}",
           s.intermediate_size());
  f.shared.intermediate_size = s.intermediate_size();
  f.shared.has_gate = s.has_gate();
  const std::optional<MoEActivation> shared_act = activation_from_proto(s.activation());
  MG_CHECK(s.intermediate_size() > 0 || !shared_act.has_value(),
           "shared.activation is set but the layer has no shared experts "
           "(shared.intermediate_size is 0)");
  f.shared.activation = f.activation;
  if (shared_act.has_value()) f.shared.activation.kind = *shared_act;
  f.quant_scheme = quant_scheme_from_proto(p.quant_scheme());
  f.backend = p.backend();
  f.dp_chunk_size = p.dp_chunk_size();
  return MoEConfig(std::move(f));
}

namespace {

std::string input_name(size_t index) {
  return fmt::format("input {} ({})", index, kInputs[index].name);
}

// Checks a present input's shape and dtype.
void check_input(const ValueType& type, size_t index, const Shape& shape,
                 std::string_view layout = {}) {
  const std::string what =
      layout.empty() ? input_name(index)
                     : fmt::format("input {} ({}, {} layout)", index, kInputs[index].name, layout);
  expect_shape(type, shape, what);
  if (!type.quant_group) expect_float(type, what);
}

void check_required(std::span<const std::optional<ValueType>> inputs, size_t index,
                    const Shape& shape, std::string_view layout = {}) {
  check_input(require_input(inputs, index, kInputs[index].name), index, shape, layout);
}

// The scale groups an FP8 scheme accepts for w13 (`gated_rows`: I for a gated activation, where a
// per-tensor checkpoint keeps one scale per projection) or w2 (0), or why `group` is not one.
std::string fp8_group_mismatch(QuantScheme scheme, GroupShape group, int64_t gated_rows) {
  switch (scheme) {
    case QuantScheme::kFp8Block:
      return group.rows >= 1 && group.cols >= 1
                 ? ""
                 : "FP8_BLOCK needs block scales (group_rows and group_cols >= 1)";
    case QuantScheme::kFp8PerChannel:
      return group == GroupShape::per_channel()
                 ? ""
                 : "FP8_PER_CHANNEL needs one scale per row (group_rows 1, group_cols -1)";
    case QuantScheme::kFp8PerTensor:
      if (group == GroupShape::per_tensor()) return "";
      if (gated_rows > 0 && group == GroupShape{gated_rows, -1}) return "";
      return gated_rows > 0 ? fmt::format(
                                  "FP8_PER_TENSOR needs one scale per matrix (group_rows and "
                                  "group_cols -1) or per projection (group_rows {}, group_cols -1)",
                                  gated_rows)
                            : "FP8_PER_TENSOR needs one scale per matrix (group_rows and "
                              "group_cols -1)";
    case QuantScheme::kUnquantized:
    case QuantScheme::kInt8WeightOnly:
    case QuantScheme::kInt4WeightOnly:
    case QuantScheme::kMxfp4:
    case QuantScheme::kNvfp4:
      break;
  }
  return "not an FP8 scheme";
}

// (fp4) MXFP4 / NVFP4 expert weights: packed FP4 codes with per-row groups of 32 / 16, in a
// layout that packs along the input dimension.
void check_fp4_expert_weight(const MoEConfig& c, const ValueType& type, const std::string& what) {
  const QuantScheme scheme = c.quant_scheme();
  const bool mx = scheme == QuantScheme::kMxfp4;
  MG_CHECK(type.quant_group && type.quant_element == QuantElement::kFp4E2M1,
           "quant_scheme {} needs {} quantized to FP4_E2M1 (TensorInfo.quantization.element), got "
           "{}",
           quant_scheme_name(scheme), what, value_type_str(type));
  MG_CHECK(c.layout() == ExpertLayout::kCanonical,
           "quant_scheme {} needs the canonical expert layout ([E, N1, H] / [E, H, I]: FP4 codes "
           "pack along the input dimension), not {}",
           quant_scheme_name(scheme), expert_layout_name(c.layout()));
  const GroupShape want{1, mx ? 32 : 16};
  MG_CHECK(*type.quant_group == want,
           "{} has scales {}, but {} needs one scale per {} values of a "
           "row (group_rows 1, group_cols {})",
           what, type.quant_group->str(), quant_scheme_name(scheme), want.cols, want.cols);
}

// INT4_WEIGHT_ONLY / INT8_WEIGHT_ONLY: integer codes of the scheme's width (group-wise or
// channel-wise along the input dimension, checked by the verifier), canonical layout.
void check_wna16_weight_quant(const MoEConfig& c, const ValueType& type, const std::string& what) {
  const QuantScheme scheme = c.quant_scheme();
  const bool four = scheme == QuantScheme::kInt4WeightOnly;
  const bool ok = type.quant_group && (four ? type.quant_element == QuantElement::kInt4 ||
                                                  type.quant_element == QuantElement::kUInt4
                                            : type.quant_element == QuantElement::kInt8 ||
                                                  type.quant_element == QuantElement::kUInt8);
  MG_CHECK(ok, "quant_scheme {} needs {} quantized to {} codes (TensorInfo.quantization), got {}",
           quant_scheme_name(scheme), what, four ? "INT4 / UINT4" : "INT8 / UINT8",
           value_type_str(type));
  MG_CHECK(c.layout() == ExpertLayout::kCanonical && !c.gate_up_interleaved(),
           "quant_scheme {} needs the canonical expert layout with gate rows before up rows",
           quant_scheme_name(scheme));
}

// w13 / w2 agree with the node's quant_scheme: codes of the scheme's type and scale groups, or
// plain floats for UNQUANTIZED.
void check_expert_weight_quant(const MoEConfig& c, const ValueType& type, size_t index) {
  const QuantScheme scheme = c.quant_scheme();
  const std::string what = input_name(index);
  if (scheme == QuantScheme::kUnquantized) {
    MG_CHECK(!type.quant_group, "{} is quantized ({}) but quant_scheme is UNQUANTIZED", what,
             value_type_str(type));
    return;
  }
  if (scheme == QuantScheme::kMxfp4 || scheme == QuantScheme::kNvfp4) {
    check_fp4_expert_weight(c, type, what);
    return;
  }
  if (is_wna16_scheme(scheme)) {
    check_wna16_weight_quant(c, type, what);
    return;
  }
  if (!is_fp8_scheme(scheme)) return;  // refused as not supported yet before the inputs are checked
  MG_CHECK(type.quant_group && type.dtype == DType::kF8E4M3,
           "quant_scheme {} needs {} quantized to F8_E4M3 (TensorInfo.quantization), got {}",
           quant_scheme_name(scheme), what, value_type_str(type));
  MG_CHECK(c.layout() == ExpertLayout::kCanonical && !c.gate_up_interleaved(),
           "quant_scheme {} needs the canonical expert layout with gate rows before up rows",
           quant_scheme_name(scheme));
  const int64_t gated_rows =
      index == moe_input::kW13 && is_gated(c.activation().kind) ? c.intermediate_size() : 0;
  const std::string why = fp8_group_mismatch(scheme, *type.quant_group, gated_rows);
  MG_CHECK(why.empty(), "{} has scales {}, but {}", what, type.quant_group->str(), why);
}

// An optional input: present iff `wanted` (`when` says when it is read), then checked.
void check_optional(std::span<const std::optional<ValueType>> inputs, size_t index, bool wanted,
                    std::string_view when, const Shape& shape) {
  const bool present = index < inputs.size() && inputs[index].has_value();
  MG_CHECK(present || !wanted, "{} is missing: it is read when {}", input_name(index), when);
  MG_CHECK(!present || wanted, "{} is given, but it is only read when {}", input_name(index), when);
  if (present) check_input(*inputs[index], index, shape);
}

}  // namespace

void check_moe_inputs(const MoEConfig& c, std::span<const std::optional<ValueType>> inputs) {
  MG_CHECK(inputs.size() <= moe_input::kCount, "op moe takes at most {} inputs, got {}",
           moe_input::kCount, inputs.size());
  const int64_t E = c.num_experts(), H = c.hidden_size(), I = c.intermediate_size();
  const int64_t N1 = c.w13_rows(), Is = c.shared().intermediate_size;
  const bool transposed = c.layout() == ExpertLayout::kTransposed;
  const std::string_view layout = expert_layout_name(c.layout());

  const ValueType& x = require_input(inputs, moe_input::kX, "x");
  expect_activation(x, input_name(moe_input::kX));
  expect_shape(x, {kTokens, H}, input_name(moe_input::kX));

  check_required(inputs, moe_input::kRouterWeight, {E, H});
  check_optional(inputs, moe_input::kRouterBias, c.routing().has_router_bias,
                 "routing.has_router_bias is set", {E});
  check_optional(inputs, moe_input::kScoreCorrectionBias, c.routing().has_score_correction_bias,
                 "routing.has_score_correction_bias is set", {E});
  check_required(inputs, moe_input::kW13, transposed ? Shape{E, H, N1} : Shape{E, N1, H}, layout);
  check_expert_weight_quant(c, *inputs[moe_input::kW13], moe_input::kW13);
  check_optional(inputs, moe_input::kW13Bias, c.has_w13_bias(), "has_w13_bias is set", {E, N1});
  check_required(inputs, moe_input::kW2, transposed ? Shape{E, I, H} : Shape{E, H, I}, layout);
  check_expert_weight_quant(c, *inputs[moe_input::kW2], moe_input::kW2);
  check_optional(inputs, moe_input::kW2Bias, c.has_w2_bias(), "has_w2_bias is set", {E, H});

  const bool shared = c.shared().present();
  const bool shared_gated = shared && is_gated(c.shared().activation.kind);
  check_optional(inputs, moe_input::kSharedGate, shared_gated,
                 "the shared experts have a gated activation", {Is, H});
  check_optional(inputs, moe_input::kSharedUp, shared, "shared.intermediate_size > 0", {Is, H});
  check_optional(inputs, moe_input::kSharedDown, shared, "shared.intermediate_size > 0", {H, Is});
  check_optional(inputs, moe_input::kSharedExpertGate, c.shared().has_gate,
                 "shared.has_gate is set", {1, H});
}

}  // namespace mg
