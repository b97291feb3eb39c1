#include "ops/moe/config.h"

#include <cmath>
#include <ostream>

#include "framework/core/error.h"

namespace mg {

// ---- Activation
// ----------------------------------------------------------------------------------

bool is_gated(MoEActivation activation) {
  switch (activation) {
    case MoEActivation::kSiluGated:
    case MoEActivation::kGeluGated:
    case MoEActivation::kGeluTanhGated:
    case MoEActivation::kSwigluOai:
      return true;
    case MoEActivation::kReluSquared:
    case MoEActivation::kSilu:
    case MoEActivation::kGelu:
      return false;
  }
  return false;
}

std::string_view activation_name(MoEActivation activation) {
  switch (activation) {
    case MoEActivation::kSiluGated:
      return "silu_gated";
    case MoEActivation::kGeluGated:
      return "gelu_gated";
    case MoEActivation::kGeluTanhGated:
      return "gelu_tanh_gated";
    case MoEActivation::kSwigluOai:
      return "swiglu_oai";
    case MoEActivation::kReluSquared:
      return "relu_squared";
    case MoEActivation::kSilu:
      return "silu";
    case MoEActivation::kGelu:
      return "gelu";
  }
  return "?";
}

void ActivationConfig::validate() const {
  if (kind != MoEActivation::kSwigluOai) return;
  MG_CHECK(std::isfinite(swiglu_alpha), "swiglu_alpha must be finite, got {}", swiglu_alpha);
  MG_CHECK(std::isfinite(swiglu_limit) && swiglu_limit > 0,
           "swiglu_limit must be finite and > 0, got {}", swiglu_limit);
}

std::string ActivationConfig::str() const {
  if (kind == MoEActivation::kSwigluOai) {
    return fmt::format("swiglu_oai(alpha={}, limit={})", swiglu_alpha, swiglu_limit);
  }
  return std::string(activation_name(kind));
}

// ---- Routing
// -------------------------------------------------------------------------------------

std::string_view routing_method_name(RoutingMethod method) {
  switch (method) {
    case RoutingMethod::kSoftmaxTopK:
      return "softmax_topk";
    case RoutingMethod::kSigmoidTopK:
      return "sigmoid_topk";
    case RoutingMethod::kTopKSoftmax:
      return "topk_softmax";
    case RoutingMethod::kGroupedTopK:
      return "grouped_topk";
    case RoutingMethod::kLlama4Top1Sigmoid:
      return "llama4_top1_sigmoid";
  }
  return "?";
}

std::string_view score_function_name(ScoreFunction function) {
  switch (function) {
    case ScoreFunction::kSoftmax:
      return "softmax";
    case ScoreFunction::kSigmoid:
      return "sigmoid";
  }
  return "?";
}

std::string_view group_score_name(GroupScore score) {
  switch (score) {
    case GroupScore::kMax:
      return "max";
    case GroupScore::kSumTop2:
      return "sum_top2";
  }
  return "?";
}

namespace {

// Methods that select on scores (and so can add a score-correction bias and renormalise).
bool selects_on_scores(RoutingMethod method) {
  switch (method) {
    case RoutingMethod::kSoftmaxTopK:
    case RoutingMethod::kSigmoidTopK:
    case RoutingMethod::kGroupedTopK:
      return true;
    case RoutingMethod::kTopKSoftmax:
    case RoutingMethod::kLlama4Top1Sigmoid:
      return false;
  }
  return false;
}

}  // namespace

ScoreFunction RoutingConfig::effective_score_function() const {
  switch (method) {
    case RoutingMethod::kSoftmaxTopK:
    case RoutingMethod::kTopKSoftmax:
      return ScoreFunction::kSoftmax;
    case RoutingMethod::kSigmoidTopK:
    case RoutingMethod::kLlama4Top1Sigmoid:
      return ScoreFunction::kSigmoid;
    case RoutingMethod::kGroupedTopK:
      return score_function;
  }
  return score_function;
}

void RoutingConfig::validate() const {
  const std::string_view name = routing_method_name(method);
  MG_CHECK(num_experts >= 1, "num_experts must be >= 1, got {}", num_experts);
  MG_CHECK(top_k >= 1 && top_k <= num_experts, "top_k must be in [1, num_experts = {}], got {}",
           num_experts, top_k);
  MG_CHECK(std::isfinite(routed_scaling_factor) && routed_scaling_factor > 0,
           "routed_scaling_factor must be finite and > 0, got {}", routed_scaling_factor);
  if (method == RoutingMethod::kGroupedTopK) {
    MG_CHECK(num_groups >= 1 && num_experts % num_groups == 0,
             "grouped_topk: num_experts ({}) must be divisible by num_groups ({})", num_experts,
             num_groups);
    MG_CHECK(groups_kept >= 1 && groups_kept <= num_groups,
             "grouped_topk: groups_kept must be in [1, num_groups = {}], got {}", num_groups,
             groups_kept);
    const int64_t group_size = num_experts / num_groups;
    MG_CHECK(groups_kept * group_size >= top_k,
             "grouped_topk: the {} kept groups of {} experts hold fewer than top_k = {} experts",
             groups_kept, group_size, top_k);
    MG_CHECK(group_score != GroupScore::kSumTop2 || group_size >= 2,
             "grouped_topk: group score sum_top2 needs at least 2 experts per group, got {}",
             group_size);
  } else {
    MG_CHECK(num_groups == 1 && groups_kept == 1,
             "{}: num_groups / groups_kept are only used by grouped_topk (got {} / {})", name,
             num_groups, groups_kept);
  }
  if (!selects_on_scores(method)) {
    MG_CHECK(!has_score_correction_bias,
             "{} selects on raw logits and takes no score-correction bias", name);
    MG_CHECK(!renormalize, "{}: renormalize has no meaning here (its weights are not top-k scores)",
             name);
  }
  if (method == RoutingMethod::kLlama4Top1Sigmoid) {
    MG_CHECK(top_k == 1, "llama4_top1_sigmoid scales the expert input and needs top_k = 1, got {}",
             top_k);
    MG_CHECK(routed_scaling_factor == 1.0f,
             "llama4_top1_sigmoid takes no routed_scaling_factor (got {})", routed_scaling_factor);
  }
}

std::string RoutingConfig::str() const {
  std::string s = fmt::format("{}(E={}, k={}", routing_method_name(method), num_experts, top_k);
  if (method == RoutingMethod::kGroupedTopK) {
    s += fmt::format(", {}, groups={}/{} by {}", score_function_name(score_function), groups_kept,
                     num_groups, group_score_name(group_score));
  }
  if (renormalize) s += ", renorm";
  if (routed_scaling_factor != 1.0f) s += fmt::format(", scale={}", routed_scaling_factor);
  if (has_router_bias) s += ", router_bias";
  if (has_score_correction_bias) s += ", score_bias";
  return s + ")";
}

// ---- Quantisation
// --------------------------------------------------------------------------------

std::string_view quant_scheme_name(QuantScheme scheme) {
  switch (scheme) {
    case QuantScheme::kUnquantized:
      return "unquantized";
    case QuantScheme::kFp8PerTensor:
      return "fp8_per_tensor";
    case QuantScheme::kFp8Block:
      return "fp8_block";
    case QuantScheme::kFp8PerChannel:
      return "fp8_per_channel";
    case QuantScheme::kInt8WeightOnly:
      return "int8_weight_only";
    case QuantScheme::kInt4WeightOnly:
      return "int4_weight_only";
    case QuantScheme::kMxfp4:
      return "mxfp4";
    case QuantScheme::kNvfp4:
      return "nvfp4";
  }
  return "?";
}

bool is_fp8_scheme(QuantScheme scheme) {
  switch (scheme) {
    case QuantScheme::kFp8PerTensor:
    case QuantScheme::kFp8Block:
    case QuantScheme::kFp8PerChannel:
      return true;
    case QuantScheme::kUnquantized:
    case QuantScheme::kInt8WeightOnly:
    case QuantScheme::kInt4WeightOnly:
    case QuantScheme::kMxfp4:
    case QuantScheme::kNvfp4:
      return false;
  }
  return false;
}

bool is_wna16_scheme(QuantScheme scheme) {
  switch (scheme) {
    case QuantScheme::kInt8WeightOnly:
    case QuantScheme::kInt4WeightOnly:
      return true;
    case QuantScheme::kUnquantized:
    case QuantScheme::kFp8PerTensor:
    case QuantScheme::kFp8Block:
    case QuantScheme::kFp8PerChannel:
    case QuantScheme::kMxfp4:
    case QuantScheme::kNvfp4:
      return false;
  }
  return false;
}

QuantKey QuantKey::integer(QuantElement element, DType scale_dtype, GroupShape group,
                           bool has_zero_point) {
  MG_CHECK(element != QuantElement::kFromDtype, "an integer key needs an integer element");
  MG_CHECK(group.rows == 1 && (group.cols == -1 || group.cols >= 1),
           "integer weight groups are [1, g] or [1, -1], got [{}, {}]", group.rows, group.cols);
  QuantKey key(element == QuantElement::kInt8 ? DType::kI8 : DType::kU8, scale_dtype, group,
               /*is_static=*/true);
  key.element_ = element;
  key.has_zero_point_ = has_zero_point;
  return key;
}

QuantKey QuantKey::unquantized(DType dtype) {
  MG_CHECK(is_floating(dtype) && dtype != DType::kF8E4M3 && dtype != DType::kF8E5M2,
           "an unquantized key needs a 16- or 32-bit floating dtype, got {}", dtype_name(dtype));
  QuantKey key;
  key.dtype_ = dtype;
  return key;
}

QuantKey::QuantKey(DType dtype, DType scale_dtype, GroupShape group, bool is_static)
    : quantized_(true),
      dtype_(dtype),
      scale_dtype_(scale_dtype),
      group_(group),
      is_static_(is_static) {
  MG_CHECK(dtype_size(dtype) == 1,
           "a quantized key needs an 8-bit (or packed 4-bit, U8) element type, got {}",
           dtype_name(dtype));
  MG_CHECK((group.rows == -1 || group.rows >= 1) && (group.cols == -1 || group.cols >= 1),
           "quant group shape [{}, {}]: each dimension must be -1 (whole) or >= 1", group.rows,
           group.cols);
}

std::string QuantKey::str() const {
  if (!quantized_) return std::string(dtype_name(dtype_));
  if (element_ != QuantElement::kFromDtype) {
    return fmt::format("{}(scale {} per [{}, {}], {}static)", quant_element_name(element_),
                       dtype_name(scale_dtype_), group_.rows, group_.cols,
                       has_zero_point_ ? "zero points, " : "");
  }
  return fmt::format("{}(scale {} per [{}, {}], {})", dtype_name(dtype_), dtype_name(scale_dtype_),
                     group_.rows, group_.cols, is_static_ ? "static" : "dynamic");
}

MoEQuantConfig MoEQuantConfig::unquantized(DType compute) {
  return MoEQuantConfig(QuantScheme::kUnquantized, QuantKey::unquantized(compute),
                        QuantKey::unquantized(compute));
}

MoEQuantConfig::MoEQuantConfig(QuantScheme scheme, QuantKey weight, QuantKey activation)
    : scheme_(scheme), weight_(weight), activation_(activation) {
  if (scheme == QuantScheme::kUnquantized) {
    MG_CHECK(!weight.quantized() && !activation.quantized(),
             "quant scheme unquantized takes unquantized keys, got weight {} activation {}",
             weight.str(), activation.str());
  } else {
    MG_CHECK(weight.quantized(), "quant scheme {} needs a quantized weight key, got {}",
             quant_scheme_name(scheme), weight.str());
  }
}

std::string MoEQuantConfig::str() const {
  return fmt::format("{}(weight {}, activation {})", quant_scheme_name(scheme_), weight_.str(),
                     activation_.str());
}

// ---- The layer
// -----------------------------------------------------------------------------------

std::string_view expert_layout_name(ExpertLayout layout) {
  switch (layout) {
    case ExpertLayout::kCanonical:
      return "canonical";
    case ExpertLayout::kTransposed:
      return "transposed";
  }
  return "?";
}

MoEConfig::MoEConfig(Fields fields) : f_(std::move(fields)) {
  f_.routing.validate();
  f_.activation.validate();
  MG_CHECK(f_.hidden_size >= 1, "hidden_size must be >= 1, got {}", f_.hidden_size);
  MG_CHECK(f_.intermediate_size >= 1, "intermediate_size must be >= 1, got {}",
           f_.intermediate_size);
  MG_CHECK(!f_.gate_up_interleaved || is_gated(f_.activation.kind),
           "gate_up_interleaved needs a gated activation, got {}", f_.activation.str());
  MG_CHECK(f_.dp_chunk_size >= 0, "dp_chunk_size must be >= 0, got {}", f_.dp_chunk_size);
  MG_CHECK(f_.shared.intermediate_size >= 0, "shared intermediate_size must be >= 0, got {}",
           f_.shared.intermediate_size);
  if (f_.shared.present()) {
    f_.shared.activation.validate();
  } else {
    MG_CHECK(!f_.shared.has_gate,
             "a shared expert gate needs shared experts (shared "
             "intermediate_size > 0)");
  }
}

int64_t MoEConfig::w13_rows() const {
  return is_gated(f_.activation.kind) ? 2 * f_.intermediate_size : f_.intermediate_size;
}

std::string MoEConfig::str() const {
  std::string s =
      fmt::format("H={} I={} act={} routing={} quant={}", f_.hidden_size, f_.intermediate_size,
                  f_.activation.str(), f_.routing.str(), quant_scheme_name(f_.quant_scheme));
  if (f_.layout != ExpertLayout::kCanonical)
    s += fmt::format(" layout={}", expert_layout_name(f_.layout));
  if (f_.gate_up_interleaved) s += " interleaved";
  if (f_.has_w13_bias) s += " w13_bias";
  if (f_.has_w2_bias) s += " w2_bias";
  if (f_.shared.present()) {
    s += fmt::format(" shared(I={}, {}{})", f_.shared.intermediate_size, f_.shared.activation.str(),
                     f_.shared.has_gate ? ", gated" : "");
  }
  if (!f_.backend.empty()) s += fmt::format(" backend={}", f_.backend);
  if (f_.dp_chunk_size > 0) s += fmt::format(" dp_chunk={}", f_.dp_chunk_size);
  return s;
}

std::ostream& operator<<(std::ostream& os, const ActivationConfig& c) {
  return os << c.str();
}
std::ostream& operator<<(std::ostream& os, const RoutingConfig& c) {
  return os << c.str();
}
std::ostream& operator<<(std::ostream& os, const QuantKey& k) {
  return os << k.str();
}
std::ostream& operator<<(std::ostream& os, const MoEQuantConfig& c) {
  return os << c.str();
}
std::ostream& operator<<(std::ostream& os, const MoEConfig& c) {
  return os << c.str();
}

}  // namespace mg
