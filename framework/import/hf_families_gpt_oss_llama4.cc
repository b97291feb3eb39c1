// Families whose experts are stored fused and transposed ([E, H, 2I], y = x W): GPT-OSS (bf16
// checkpoints: interleaved gate/up columns, biases, clamped SwiGLU, sinks, alternating sliding
// window; the released MXFP4 checkpoints store the experts as [E, 2I, H] codes instead) and Llama-4
// text (top-1 sigmoid on the expert input, shared expert, NoPE layers with temperature tuning,
// chunked attention and L2 qk-norm on RoPE layers, dense/MoE interleave).
#include <algorithm>

#include "framework/core/error.h"
#include "framework/import/decoder_blocks.h"
#include "framework/import/hf_families.h"

namespace mg {

namespace {

proto::MoEParams transposed_moe(int64_t experts, int64_t top_k, int64_t hidden, int64_t inter) {
  proto::MoEParams p;
  p.set_num_experts(experts);
  p.set_top_k(top_k);
  p.set_hidden_size(hidden);
  p.set_intermediate_size(inter);
  p.set_expert_layout(proto::MOE_LAYOUT_TRANSPOSED);
  return p;
}

}  // namespace

CommonConfig import_gpt_oss(ImportGraph& g, const ConfigReader& c, const LayerProgress& on_layer) {
  const CommonConfig cc = read_common(
      c,
      {.rms_eps = 1e-5, .rope_theta = 150000.0, .head_dim = 64, .max_position_embeddings = 131072});
  const int64_t experts =
      c.positive(c.pick({"num_local_experts", "num_experts"}), kMaxConfigExperts);
  const int64_t top_k =
      read_top_k(c, experts, c.pick({"num_experts_per_tok", "experts_per_token"}));
  const int64_t inter = c.positive("intermediate_size");
  const bool bias = c.boolean_or("attention_bias", true);
  std::vector<LayerAttention> masks(static_cast<size_t>(cc.layers));
  if (const auto types = c.strings_opt("layer_types")) {
    masks = layer_attention_from_types(c, *types, cc.layers);
  } else {
    // transformers' default: even layers slide, odd layers see everything.
    const int64_t window = c.integer_or("sliding_window", 128);
    if (window <= 0)
      c.fail("sliding_window", fmt::format("expected a positive integer, found {}", window));
    for (int64_t i = 0; i < cc.layers; i += 2) masks[i].sliding_window = window;
  }

  // GPT-OSS as released: MXFP4 experts (*_blocks / *_scales), everything else bf16.
  const bool mxfp4 = g.quantization().method == HfQuantization::Method::kMxfp4;

  DecoderSkeleton s;
  s.on_layer = on_layer;
  s.attention = [&](int layer, const std::string& x) {
    StandardAttention a;
    a.prefix = fmt::format("model.layers.{}.self_attn.", layer);
    a.hidden = cc.hidden;
    a.heads = cc.heads;
    a.kv_heads = cc.kv_heads;
    a.head_dim = cc.head_dim;
    a.qkv_bias = a.o_bias = bias;
    a.rope = &cc.rope;
    a.mask = masks[layer];
    a.sinks = true;
    return standard_attention(g, fmt::format("layers.{}.attn", layer), a, x);
  };
  s.ffn = [&](int layer, const std::string& x) {
    const std::string mlp = fmt::format("model.layers.{}.mlp.", layer);
    MoeInputs in;
    in.router_weight = g.weight(mlp + "router.weight", {experts, cc.hidden});
    in.router_bias = g.weight(mlp + "router.bias", {experts});
    in.w13_bias = g.weight(mlp + "experts.gate_up_proj_bias", {experts, 2 * inter});
    in.w2_bias = g.weight(mlp + "experts.down_proj_bias", {experts, cc.hidden});
    proto::MoEParams p = transposed_moe(experts, top_k, cc.hidden, inter);
    if (mxfp4) {
      // As released: [E, out, in] codes (canonical rows, gate/up still interleaved).
      in.w13 = g.mxfp4_weight(mlp + "experts.gate_up_proj", {experts, 2 * inter, cc.hidden},
                              "hidden_size");
      in.w2 = g.mxfp4_weight(mlp + "experts.down_proj", {experts, cc.hidden, inter},
                             "intermediate_size");
      p.set_expert_layout(proto::MOE_LAYOUT_CANONICAL);
      p.set_quant_scheme(proto::MOE_QUANT_MXFP4);
    } else {
      in.w13 = g.weight(mlp + "experts.gate_up_proj", {experts, cc.hidden, 2 * inter});
      in.w2 = g.weight(mlp + "experts.down_proj", {experts, inter, cc.hidden});
    }
    // The bf16 expert class hard-codes alpha 1.702 and limit 7 (swiglu_limit is read only by the
    // MXFP4 kernels), which are the op's defaults.
    p.set_activation(proto::SWIGLU_OAI);
    p.set_gate_up_interleaved(true);
    p.set_has_w13_bias(true);
    p.set_has_w2_bias(true);
    p.mutable_routing()->set_method(proto::TOPK_SOFTMAX);
    p.mutable_routing()->set_has_router_bias(true);
    return moe(g, fmt::format("layers.{}.moe", layer), x, p, in);
  };
  build_decoder(g, cc, s);
  return cc;
}

// Llama-4 text. `c` is the text config: config.json itself for "llama4_text", its
// "text_config" for the multimodal "llama4" (the caller picks; weights then live under
// "language_model.").
CommonConfig import_llama4(ImportGraph& g, const ConfigReader& c, const LayerProgress& on_layer) {
  const CommonConfig cc = read_common(c, {.rms_eps = 1e-5,
                                          .rope_theta = 500000.0,
                                          .head_dim = 128,
                                          .max_position_embeddings = 4096 * 32});
  const bool multimodal = g.has("language_model.model.embed_tokens.weight");
  const std::string model_prefix = multimodal ? "language_model.model." : "model.";
  const int64_t experts = c.positive("num_local_experts", kMaxConfigExperts);
  const int64_t top_k = read_top_k(c, experts);
  if (top_k != 1)
    c.fail("num_experts_per_tok", fmt::format("Llama-4 routing needs 1, found {}", top_k));
  const int64_t inter = c.positive("intermediate_size");

  // RoPE layers: no_rope_layers[i] == 1 (default: every no_rope_layer_interval-th layer is NoPE).
  std::vector<int64_t> use_rope = c.integers_opt("no_rope_layers").value_or(std::vector<int64_t>{});
  if (use_rope.empty()) {
    const int64_t interval = c.integer_or("no_rope_layer_interval", 4);
    if (interval <= 0) c.fail("no_rope_layer_interval", "expected a positive integer");
    for (int64_t i = 0; i < cc.layers; ++i) use_rope.push_back((i + 1) % interval != 0 ? 1 : 0);
  }
  if (static_cast<int64_t>(use_rope.size()) != cc.layers) {
    c.fail("no_rope_layers",
           fmt::format("lists {} layers, but num_hidden_layers is {}", use_rope.size(), cc.layers));
  }
  // MoE layers: moe_layers, or every interleave_moe_layer_step-th layer.
  std::vector<int64_t> moe_layers;
  if (const auto listed = c.integers_opt("moe_layers")) {
    moe_layers = *listed;
    for (size_t i = 0; i < moe_layers.size(); ++i) {
      const bool ascending = i == 0 || moe_layers[i] > moe_layers[i - 1];
      if (moe_layers[i] < 0 || moe_layers[i] >= cc.layers || !ascending) {
        c.fail("moe_layers", fmt::format("expected distinct ascending layer indices in [0, {}), "
                                         "found {} at position {}",
                                         cc.layers, moe_layers[i], i));
      }
    }
  } else {
    const int64_t step = c.integer_or("interleave_moe_layer_step", 1);
    if (step <= 0) c.fail("interleave_moe_layer_step", "expected a positive integer");
    for (int64_t i = step - 1; i < cc.layers; i += step) moe_layers.push_back(i);
  }
  const bool any_dense = static_cast<int64_t>(moe_layers.size()) < cc.layers;
  const int64_t dense_inter = any_dense ? c.positive("intermediate_size_mlp") : 0;
  std::vector<LayerAttention> masks(static_cast<size_t>(cc.layers));
  if (const auto types = c.strings_opt("layer_types")) {
    masks = layer_attention_from_types(c, *types, cc.layers);
  } else {
    const int64_t chunk = c.integer_or("attention_chunk_size", 8192);
    for (int64_t i = 0; i < cc.layers; ++i) {
      if (use_rope[i] != 0) masks[i].chunk_size = chunk;
    }
  }
  const bool qk_norm = c.boolean_or("use_qk_norm", true);
  const bool temperature_tuning = c.boolean_or("attn_temperature_tuning", true);
  const float attn_scale = finite_float_param(c, "attn_scale", c.number_or("attn_scale", 0.1));
  const float floor_scale =
      temperature_tuning ? positive_float_param(c, "floor_scale", c.number_or("floor_scale", 8192))
                         : 8192.0f;
  const bool bias = c.boolean_or("attention_bias", false);

  DecoderSkeleton s;
  s.prefix = model_prefix;
  s.lm_head = multimodal ? "language_model.lm_head.weight" : "lm_head.weight";
  s.on_layer = on_layer;
  s.attention = [&](int layer, const std::string& x) {
    StandardAttention a;
    a.prefix = fmt::format("{}layers.{}.self_attn.", model_prefix, layer);
    a.hidden = cc.hidden;
    a.heads = cc.heads;
    a.kv_heads = cc.kv_heads;
    a.head_dim = cc.head_dim;
    a.qkv_bias = a.o_bias = bias;
    a.norm_eps = cc.rms_eps;
    a.mask = masks[layer];
    if (use_rope[layer] != 0) {
      a.rope = &cc.rope;
      a.pairing = proto::INTERLEAVED;  // complex multiply on (2i, 2i + 1) pairs
      a.l2_qk_norm = qk_norm;
    } else if (temperature_tuning) {
      a.temperature = std::make_pair(attn_scale, floor_scale);
    }
    return standard_attention(g, fmt::format("layers.{}.attn", layer), a, x);
  };
  s.ffn = [&](int layer, const std::string& x) {
    const std::string ff = fmt::format("{}layers.{}.feed_forward.", model_prefix, layer);
    const std::string node = fmt::format("layers.{}", layer);
    if (std::find(moe_layers.begin(), moe_layers.end(), layer) == moe_layers.end()) {
      return dense_mlp(g, node + ".mlp", ff, cc.hidden, dense_inter, x);
    }
    MoeInputs in;
    in.router_weight = g.weight(ff + "router.weight", {experts, cc.hidden});
    in.w13 = g.weight(ff + "experts.gate_up_proj", {experts, cc.hidden, 2 * inter});
    in.w2 = g.weight(ff + "experts.down_proj", {experts, inter, cc.hidden});
    in.shared_gate = g.weight(ff + "shared_expert.gate_proj.weight", {inter, cc.hidden});
    in.shared_up = g.weight(ff + "shared_expert.up_proj.weight", {inter, cc.hidden});
    in.shared_down = g.weight(ff + "shared_expert.down_proj.weight", {cc.hidden, inter});
    proto::MoEParams p = transposed_moe(experts, top_k, cc.hidden, inter);
    p.set_activation(proto::SILU_GATED);
    p.mutable_routing()->set_method(proto::LLAMA4_TOP1_SIGMOID);
    p.mutable_shared()->set_intermediate_size(inter);
    return moe(g, node + ".moe", x, p, in);
  };
  build_decoder(g, cc, s);
  return cc;
}

}  // namespace mg
