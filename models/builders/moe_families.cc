// MoE families for make-model: each builds one "moe" node per MoE layer, shaped like the
// Hugging Face family it is named after (routing, activation, shared experts, biases, weight
// layout), on the decoder skeleton of decoder_builder.cc. The attention of every family here is
// standard GQA (with the family's variants: q/k norm, qkv bias, sinks, sliding window); DeepSeek's
// MLA attention comes with the Hugging Face importer.
#include <cmath>

#include "models/builders/decoder_builder.h"

namespace mg {

namespace {

float spread(int64_t fan_in) {
  return 1.0f / std::sqrt(static_cast<float>(fan_in));
}

// What differs between the MoE families' FFN blocks.
struct MoEStyle {
  proto::MoERoutingMethod method = proto::SOFTMAX_TOPK;
  bool renormalize = false;
  proto::Activation activation = proto::SILU_GATED;
  bool interleaved = false;
  bool transposed = false;
  bool expert_biases = false;
  bool router_bias = false;
  // GROUPED_TOPK
  int64_t num_groups = 0;
  int64_t groups_kept = 0;
  proto::MoEScoreFunction score_function = proto::MOE_SCORE_UNSPECIFIED;
  proto::MoEGroupScore group_score = proto::MOE_GROUP_SCORE_UNSPECIFIED;
  bool score_correction_bias = false;
  float routed_scaling = 1.0f;
  bool shared_gate = false;  // Qwen2-MoE's sigmoid shared-expert gate
};

// w13 / w2 as FP8 of spec.moe_quant: 128 x 128 blocks and per-128-channel activations (DeepSeek-
// V3's format), one scale per row or per projection (w2: per matrix) with per-token activations.
void quantize_experts_fp8(GraphBuilder& b, const DecoderSpec& spec, const std::string& w13,
                          const std::string& w2, int64_t I) {
  switch (spec.moe_quant) {
    case proto::MOE_QUANT_FP8_BLOCK:
      b.quantize_fp8(w13, GroupShape::block(128, 128), ActivationQuant::kDynamic, 128);
      b.quantize_fp8(w2, GroupShape::block(128, 128), ActivationQuant::kDynamic, 128);
      return;
    case proto::MOE_QUANT_FP8_PER_CHANNEL:
      b.quantize_fp8(w13, GroupShape::per_channel(), ActivationQuant::kDynamic, -1);
      b.quantize_fp8(w2, GroupShape::per_channel(), ActivationQuant::kDynamic, -1);
      return;
    case proto::MOE_QUANT_FP8_PER_TENSOR:
      b.quantize_fp8(w13, GroupShape{I, -1}, ActivationQuant::kDynamic, -1);
      b.quantize_fp8(w2, GroupShape::per_tensor(), ActivationQuant::kDynamic, -1);
      return;
    case proto::MOE_QUANT_MXFP4:
      b.quantize_fp4(w13, 32, /*nvfp4=*/false);
      b.quantize_fp4(w2, 32, /*nvfp4=*/false);
      return;
    case proto::MOE_QUANT_NVFP4:
      b.quantize_fp4(w13, 16, /*nvfp4=*/true);
      b.quantize_fp4(w2, 16, /*nvfp4=*/true);
      return;
    case proto::MOE_QUANT_INT4_WEIGHT_ONLY:
    case proto::MOE_QUANT_INT8_WEIGHT_ONLY:
      // Weight-only: integer codes per output row per group of inputs (framework/core/int_quant.h).
      b.quantize_int(w13, spec.moe_quant_element, spec.moe_quant_group);
      b.quantize_int(w2, spec.moe_quant_element, spec.moe_quant_group);
      return;
    default:
      MG_FAIL(
          "make-model quantizes experts to FP8 (fp8-block, fp8-channel, fp8-tensor), FP4 (mxfp4, "
          "nvfp4) or integer codes (int4-g128 ...) only");
  }
}

std::string moe_ffn(GraphBuilder& b, const DecoderSpec& spec, int layer, const std::string& x,
                    const MoEStyle& style) {
  const std::string name = fmt::format("layers.{}.moe", layer);
  const int64_t E = spec.experts, H = spec.hidden, I = spec.moe_intermediate;
  const int64_t Is = spec.shared_intermediate;
  // The MoE op would refuse these too, but naming a graph node; these name the make-model flags.
  MG_CHECK(E >= 1 && spec.top_k >= 1 && spec.top_k <= E,
           "--topk ({}) must be between 1 and --experts ({})", spec.top_k, E);
  MG_CHECK(I > 0, "--moe-inter must be positive, got {}", I);
  if (style.num_groups > 0) {
    MG_CHECK(E % style.num_groups == 0,
             "--experts ({}) must be a multiple of the {} expert groups of family {}", E,
             style.num_groups, spec.family);
    MG_CHECK(spec.top_k <= style.groups_kept * (E / style.num_groups),
             "--topk ({}) must be at most the {} experts of the {} groups family {} keeps",
             spec.top_k, style.groups_kept * (E / style.num_groups), style.groups_kept,
             spec.family);
  }
  const std::string router = b.weight(name + ".router.weight", {E, H}, spread(H));
  const std::string router_bias =
      style.router_bias ? b.weight(name + ".router.bias", {E}, 0.5f) : "";
  const std::string score_bias =
      style.score_correction_bias
          ? b.weight_as(name + ".router.score_correction_bias", {E}, 0.2f, 0.0f, DType::kF32)
          : "";
  // FP4 packs along the input dimension: a transposed family (GPT-OSS) gets the canonical layout,
  // as GPT-OSS's released MXFP4 checkpoints have it (gate/up stay interleaved).
  const bool fp4 =
      spec.moe_quant == proto::MOE_QUANT_MXFP4 || spec.moe_quant == proto::MOE_QUANT_NVFP4;
  const bool transposed = style.transposed && !fp4;
  const Shape w13_shape = transposed ? Shape{E, H, 2 * I} : Shape{E, 2 * I, H};
  const Shape w2_shape = transposed ? Shape{E, I, H} : Shape{E, H, I};
  const std::string w13 = b.weight(name + ".experts.w13", w13_shape, spread(H));
  const std::string w2 = b.weight(name + ".experts.w2", w2_shape, spread(I));
  const std::string w13_bias =
      style.expert_biases ? b.weight(name + ".experts.w13_bias", {E, 2 * I}, 0.1f) : "";
  const std::string w2_bias =
      style.expert_biases ? b.weight(name + ".experts.w2_bias", {E, H}, 0.1f) : "";
  if (spec.moe_quant != proto::MOE_QUANT_UNQUANTIZED) {
    MG_CHECK(fp4 || (!style.transposed && !style.interleaved),
             "--quant: family {} stores its experts transposed / interleaved, which the "
             "quantized schemes do not take",
             spec.family);
    quantize_experts_fp8(b, spec, w13, w2, I);
  }
  std::string shared_gate, shared_up, shared_down, shared_expert_gate;
  if (Is > 0) {
    shared_gate = b.weight(name + ".shared.gate_proj.weight", {Is, H}, spread(H));
    shared_up = b.weight(name + ".shared.up_proj.weight", {Is, H}, spread(H));
    shared_down = b.weight(name + ".shared.down_proj.weight", {H, Is}, spread(Is));
    if (style.shared_gate)
      shared_expert_gate = b.weight(name + ".shared_expert_gate.weight", {1, H}, spread(H));
  }
  proto::Node& n = b.node(name, "moe",
                          {x, router, router_bias, score_bias, w13, w13_bias, w2, w2_bias,
                           shared_gate, shared_up, shared_down, shared_expert_gate},
                          {name + ".out"});
  proto::MoEParams* p = n.mutable_moe();
  p->set_num_experts(E);
  p->set_top_k(spec.top_k);
  p->set_hidden_size(H);
  p->set_intermediate_size(I);
  p->set_activation(style.activation);
  p->set_gate_up_interleaved(style.interleaved);
  p->set_expert_layout(transposed ? proto::MOE_LAYOUT_TRANSPOSED : proto::MOE_LAYOUT_CANONICAL);
  p->set_has_w13_bias(style.expert_biases);
  p->set_has_w2_bias(style.expert_biases);
  p->set_quant_scheme(spec.moe_quant);
  proto::MoERoutingParams* r = p->mutable_routing();
  r->set_method(style.method);
  r->set_renormalize(style.renormalize);
  r->set_has_router_bias(style.router_bias);
  r->set_has_score_correction_bias(style.score_correction_bias);
  if (style.method == proto::GROUPED_TOPK) {
    r->set_score_function(style.score_function);
    r->set_num_groups(style.num_groups);
    r->set_groups_kept(style.groups_kept);
    r->set_group_score(style.group_score);
  }
  if (style.routed_scaling != 1.0f) r->set_routed_scaling_factor(style.routed_scaling);
  if (Is > 0) {
    p->mutable_shared()->set_intermediate_size(Is);
    p->mutable_shared()->set_has_gate(style.shared_gate);
  }
  return name + ".out";
}

FfnBuilder moe_builder(MoEStyle style) {
  return [style](GraphBuilder& b, const DecoderSpec& spec, int layer, const std::string& x) {
    return moe_ffn(b, spec, layer, x, style);
  };
}

}  // namespace

void add_moe_families(std::vector<Family>& families) {
  families.push_back({"mixtral",
                      "Mixtral-shaped MoE: softmax top-2 of 8, renormalised, SwiGLU experts",
                      [](DecoderSpec& s) {
                        s.experts = 8;
                        s.top_k = 2;
                      },
                      moe_builder({.renormalize = true})});

  families.push_back({"qwen3_moe",
                      "Qwen3-MoE-shaped: softmax top-4 of 16, renormalised, per-head q/k norm",
                      [](DecoderSpec& s) {
                        s.experts = 16;
                        s.top_k = 4;
                        s.moe_intermediate = 32;
                        s.qk_norm = true;
                      },
                      moe_builder({.renormalize = true})});

  families.push_back({"qwen2_moe",
                      "Qwen2-MoE-shaped: softmax top-4 of 8 (no renormalisation), shared expert "
                      "with sigmoid gate, qkv bias",
                      [](DecoderSpec& s) {
                        s.experts = 8;
                        s.top_k = 4;
                        s.moe_intermediate = 32;
                        s.shared_intermediate = 96;
                        s.qkv_bias = true;
                      },
                      moe_builder({.shared_gate = true})});

  families.push_back({"deepseek_v3",
                      "DeepSeek-V3-shaped MoE: sigmoid grouped top-4 of 16 (4 groups, 2 kept, "
                      "sum-of-top-2 group score) with score-correction bias, renormalised, "
                      "scaled by 2.5, shared experts, first layer dense (GQA attention, not MLA)",
                      [](DecoderSpec& s) {
                        s.experts = 16;
                        s.top_k = 4;
                        s.moe_intermediate = 32;
                        s.shared_intermediate = 64;
                        s.first_dense_layers = 1;
                      },
                      moe_builder({.method = proto::GROUPED_TOPK,
                                   .renormalize = true,
                                   .num_groups = 4,
                                   .groups_kept = 2,
                                   .score_function = proto::MOE_SCORE_SIGMOID,
                                   .group_score = proto::MOE_GROUP_SUM_TOP2,
                                   .score_correction_bias = true,
                                   .routed_scaling = 2.5f})});

  families.push_back({"gpt_oss",
                      "GPT-OSS-shaped: router bias, top-4 of 8 then softmax, SwiGLU-OAI with "
                      "interleaved gate/up in the transposed layout, expert biases, attention "
                      "sinks, sliding window on even layers, qkv bias",
                      [](DecoderSpec& s) {
                        s.experts = 8;
                        s.top_k = 4;
                        s.qkv_bias = true;
                        s.sinks = true;
                        s.sliding_window = 4;
                      },
                      moe_builder({.method = proto::TOPK_SOFTMAX,
                                   .activation = proto::SWIGLU_OAI,
                                   .interleaved = true,
                                   .transposed = true,
                                   .expert_biases = true,
                                   .router_bias = true})});

  families.push_back({"llama4",
                      "Llama-4-shaped: top-1 of 8 with the sigmoid weight on the expert input, "
                      "shared expert, transposed expert layout",
                      [](DecoderSpec& s) {
                        s.experts = 8;
                        s.top_k = 1;
                        s.shared_intermediate = 64;
                      },
                      moe_builder({.method = proto::LLAMA4_TOP1_SIGMOID, .transposed = true})});
}

}  // namespace mg
