// Value types that describe one MoE layer: what it computes (MoEConfig with its routing and
// activation), how its weights are stored (QuantKey, MoEQuantConfig). Each is validated when it
// is made (throws mg::Error naming the bad field), printable (str(), operator<<) and comparable.
// ParallelConfig, the placement over ranks, lives in framework/parallel/parallel_config.h.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <string_view>

#include "framework/core/dtype.h"
#include "framework/core/quant.h"

namespace mg {

// ---- Activation
// ----------------------------------------------------------------------------------

// Expert activation. Gated ones read GEMM1 rows [gate (I) | up (I)] and give I values; the
// others read I values and give I values.
enum class MoEActivation : uint8_t {
  kSiluGated,      // silu(gate) * up
  kGeluGated,      // gelu_erf(gate) * up
  kGeluTanhGated,  // gelu_tanh(gate) * up
  kSwigluOai,      // GPT-OSS: g = min(gate, limit), u = clamp(up, -limit, limit),
                   //          (u + 1) * g * sigmoid(alpha * g)
  kReluSquared,    // relu(x)^2
  kSilu,           // silu(x)
  kGelu,           // gelu_erf(x)
};
bool is_gated(MoEActivation activation);
std::string_view activation_name(MoEActivation activation);

struct ActivationConfig {
  MoEActivation kind = MoEActivation::kSiluGated;
  // kSwigluOai only.
  float swiglu_alpha = 1.702f;
  float swiglu_limit = 7.0f;

  // Throws mg::Error when alpha or limit are not finite, or limit <= 0.
  void validate() const;
  std::string str() const;
  bool operator==(const ActivationConfig&) const = default;
};

// ---- Routing
// -------------------------------------------------------------------------------------

// The formulas are in proto/model.proto (MoERoutingMethod) and ops/moe/README.md.
enum class RoutingMethod : uint8_t {
  kSoftmaxTopK,
  kSigmoidTopK,
  kTopKSoftmax,
  kGroupedTopK,
  kLlama4Top1Sigmoid,
};
enum class ScoreFunction : uint8_t { kSoftmax, kSigmoid };
enum class GroupScore : uint8_t { kMax, kSumTop2 };
std::string_view routing_method_name(RoutingMethod method);
std::string_view score_function_name(ScoreFunction function);
std::string_view group_score_name(GroupScore score);

struct RoutingConfig {
  RoutingMethod method = RoutingMethod::kSoftmaxTopK;
  int64_t num_experts = 0;
  int64_t top_k = 0;
  bool renormalize = false;
  // kGroupedTopK only (kSoftmaxTopK / kSigmoidTopK imply theirs).
  ScoreFunction score_function = ScoreFunction::kSoftmax;
  // kGroupedTopK only.
  int64_t num_groups = 1;
  int64_t groups_kept = 1;
  GroupScore group_score = GroupScore::kMax;
  float routed_scaling_factor = 1.0f;
  bool has_router_bias = false;
  bool has_score_correction_bias = false;

  // Throws mg::Error: top_k not in [1, num_experts], num_experts not divisible by num_groups,
  // groups_kept not in [1, num_groups], too few experts in the kept groups for top_k, a
  // score-correction bias or renormalisation for a method that does not use one, Llama-4
  // routing with top_k != 1 or a scaling factor, a non-finite or non-positive scaling factor.
  void validate() const;
  // The score function the method applies before selection (kTopKSoftmax and Llama-4 select on
  // raw logits and report kSoftmax / kSigmoid for their weights).
  ScoreFunction effective_score_function() const;
  // Llama-4: the weight multiplies the expert input, not its output.
  bool weight_on_input() const { return method == RoutingMethod::kLlama4Top1Sigmoid; }
  std::string str() const;
  bool operator==(const RoutingConfig&) const = default;
};

// ---- Quantisation
// --------------------------------------------------------------------------------

enum class QuantScheme : uint8_t {
  kUnquantized,
  kFp8PerTensor,
  kFp8Block,
  kFp8PerChannel,
  kInt8WeightOnly,
  kInt4WeightOnly,
  kMxfp4,
  kNvfp4,
};
std::string_view quant_scheme_name(QuantScheme scheme);
// kFp8Block, kFp8PerChannel or kFp8PerTensor: the schemes of the FP8 oracle module.
bool is_fp8_scheme(QuantScheme scheme);
// kInt4WeightOnly or kInt8WeightOnly: the schemes of the WNA16 oracle module (oracle/wna16.h).
bool is_wna16_scheme(QuantScheme scheme);

// How one GEMM operand (weights or activations) is stored: element type and, when quantised,
// its scales. The oracle matches (weight key, activation key) pairs against what each expert
// backend supports.
class QuantKey {
 public:
  // Not quantised: elements of `dtype` (a floating type), no scales.
  static QuantKey unquantized(DType dtype = DType::kF32);
  // Quantised elements of `dtype` with one `scale_dtype` scale per `group`, fixed at load time
  // (is_static) or computed per call. Throws mg::Error for a floating `dtype` wider than 8 bits
  // or a group dimension that is 0 or < -1.
  QuantKey(DType dtype, DType scale_dtype, GroupShape group, bool is_static);
  // Weight-only integer codes of `element` (kInt4 ... kUInt8; framework/core/int_quant.h): static
  // `scale_dtype` scales per `group` ({1, g} or {1, -1}), zero points when `has_zero_point`.
  static QuantKey integer(QuantElement element, DType scale_dtype, GroupShape group,
                          bool has_zero_point);

  bool quantized() const { return quantized_; }
  DType dtype() const { return dtype_; }
  DType scale_dtype() const { return scale_dtype_; }
  GroupShape group() const { return group_; }
  bool is_static() const { return is_static_; }
  // kFromDtype unless made by integer(); then dtype() is the canonical codes dtype (U8 / I8).
  QuantElement element() const { return element_; }
  bool has_zero_point() const { return has_zero_point_; }
  // "F32", "F8_E4M3(scale F32 per [128, 128], static)" or
  // "uint4(scale F32 per [1, 128], zero points, static)".
  std::string str() const;
  bool operator==(const QuantKey&) const = default;

 private:
  QuantKey() = default;
  QuantElement element_ = QuantElement::kFromDtype;
  bool has_zero_point_ = false;
  bool quantized_ = false;
  DType dtype_ = DType::kF32;
  DType scale_dtype_ = DType::kF32;
  GroupShape group_;
  bool is_static_ = true;
};

// The quantisation of one MoE layer: its scheme and the keys of weights and activations.
class MoEQuantConfig {
 public:
  // Unquantised weights and activations in `compute` dtype.
  static MoEQuantConfig unquantized(DType compute = DType::kF32);
  // Throws mg::Error when the keys do not fit the scheme (an unquantised scheme with a
  // quantised key, a quantised scheme whose weight key is not quantised).
  MoEQuantConfig(QuantScheme scheme, QuantKey weight, QuantKey activation);

  QuantScheme scheme() const { return scheme_; }
  const QuantKey& weight_key() const { return weight_; }
  const QuantKey& activation_key() const { return activation_; }
  std::string str() const;
  bool operator==(const MoEQuantConfig&) const = default;

 private:
  QuantScheme scheme_;
  QuantKey weight_;
  QuantKey activation_;
};

// ---- The layer
// -----------------------------------------------------------------------------------

enum class ExpertLayout : uint8_t {
  kCanonical,   // w13 [E, N1, H], w2 [E, H, I] (y = x W^T)
  kTransposed,  // w13 [E, H, N1], w2 [E, I, H] (y = x W; GPT-OSS, Llama-4)
};
std::string_view expert_layout_name(ExpertLayout layout);

struct SharedExpertsConfig {
  // 0: no shared experts.
  int64_t intermediate_size = 0;
  ActivationConfig activation;
  // Output scaled by sigmoid(x . w_sg) per token (Qwen2-MoE).
  bool has_gate = false;

  bool present() const { return intermediate_size > 0; }
  bool operator==(const SharedExpertsConfig&) const = default;
};

class MoEConfig {
 public:
  struct Fields {
    // Holds num_experts and top_k.
    RoutingConfig routing;
    int64_t hidden_size = 0;
    int64_t intermediate_size = 0;
    ActivationConfig activation;
    ExpertLayout layout = ExpertLayout::kCanonical;
    // Gated activations: gate and up rows of w13 alternate (GPT-OSS).
    bool gate_up_interleaved = false;
    bool has_w13_bias = false;
    bool has_w2_bias = false;
    SharedExpertsConfig shared;
    QuantScheme quant_scheme = QuantScheme::kUnquantized;
    // Requested expert backend, "" for the oracle's choice.
    std::string backend;
    // Tokens per rank per DP step; 0 = all.
    int64_t dp_chunk_size = 0;
    bool operator==(const Fields&) const = default;
  };

  // Validates every field (see RoutingConfig::validate, ActivationConfig::validate); throws
  // mg::Error naming the field.
  explicit MoEConfig(Fields fields);

  int64_t num_experts() const { return f_.routing.num_experts; }
  int64_t top_k() const { return f_.routing.top_k; }
  int64_t hidden_size() const { return f_.hidden_size; }
  int64_t intermediate_size() const { return f_.intermediate_size; }
  // Rows of one expert's w13: 2I for gated activations, I otherwise.
  int64_t w13_rows() const;
  const RoutingConfig& routing() const { return f_.routing; }
  const ActivationConfig& activation() const { return f_.activation; }
  ExpertLayout layout() const { return f_.layout; }
  bool gate_up_interleaved() const { return f_.gate_up_interleaved; }
  bool has_w13_bias() const { return f_.has_w13_bias; }
  bool has_w2_bias() const { return f_.has_w2_bias; }
  const SharedExpertsConfig& shared() const { return f_.shared; }
  QuantScheme quant_scheme() const { return f_.quant_scheme; }
  const std::string& backend() const { return f_.backend; }
  int64_t dp_chunk_size() const { return f_.dp_chunk_size; }
  const Fields& fields() const { return f_; }

  // One line: "E=8 k=2 H=64 I=32 act=silu_gated routing=softmax_topk(renorm) ...".
  std::string str() const;
  bool operator==(const MoEConfig&) const = default;

 private:
  Fields f_;
};

std::ostream& operator<<(std::ostream& os, const ActivationConfig& config);
std::ostream& operator<<(std::ostream& os, const RoutingConfig& config);
std::ostream& operator<<(std::ostream& os, const QuantKey& key);
std::ostream& operator<<(std::ostream& os, const MoEQuantConfig& config);
std::ostream& operator<<(std::ostream& os, const MoEConfig& config);

}  // namespace mg
