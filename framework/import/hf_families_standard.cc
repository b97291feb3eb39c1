// Families with standard GQA attention and per-expert or fused-canonical experts: Mixtral,
// Qwen2-MoE, Qwen3-MoE, OLMoE, Granite-MoE (+ shared).
#include <algorithm>
#include <cmath>

#include "framework/core/error.h"
#include "framework/import/decoder_blocks.h"
#include "framework/import/hf_families.h"

namespace mg {

namespace {

std::string layer_prefix(int layer) {
  return fmt::format("model.layers.{}.", layer);
}
std::string node_name(int layer, const char* what) {
  return fmt::format("layers.{}.{}", layer, what);
}

StandardAttention base_attention(const CommonConfig& cc, int layer) {
  StandardAttention a;
  a.prefix = layer_prefix(layer) + "self_attn.";
  a.hidden = cc.hidden;
  a.heads = cc.heads;
  a.kv_heads = cc.kv_heads;
  a.head_dim = cc.head_dim;
  a.norm_eps = cc.rms_eps;
  a.rope = &cc.rope;
  return a;
}

proto::MoEParams moe_params(int64_t experts, int64_t top_k, int64_t hidden, int64_t inter) {
  proto::MoEParams p;
  p.set_num_experts(experts);
  p.set_top_k(top_k);
  p.set_hidden_size(hidden);
  p.set_intermediate_size(inter);
  p.set_activation(proto::SILU_GATED);
  return p;
}

// Experts stored one module per expert: "<moe>experts.{e}.<gate|up|down>.weight".
MoeInputs per_expert_weights(ImportGraph& g, const std::string& moe_prefix, int64_t experts,
                             int64_t inter, int64_t hidden, const std::string& gate,
                             const std::string& up, const std::string& down) {
  MoeInputs in;
  in.w13 = stack_w13(
      g, moe_prefix + "experts.w13", experts, inter, hidden, [&](int64_t e, bool is_gate) {
        return fmt::format("{}experts.{}.{}.weight", moe_prefix, e, is_gate ? gate : up);
      });
  in.w2 = stack_w2(g, moe_prefix + "experts.w2", experts, inter, hidden, [&](int64_t e) {
    return fmt::format("{}experts.{}.{}.weight", moe_prefix, e, down);
  });
  return in;
}

// Qwen2/3-MoE: layer i is sparse iff i is not in mlp_only_layers, there are experts, and
// (i + 1) % decoder_sparse_step == 0.
std::vector<bool> qwen_sparse_layers(const ConfigReader& c, int64_t layers, int64_t experts) {
  const int64_t step = c.integer_or("decoder_sparse_step", 1);
  if (step <= 0) c.fail("decoder_sparse_step", "expected a positive integer");
  const std::vector<int64_t> mlp_only =
      c.integers_opt("mlp_only_layers").value_or(std::vector<int64_t>{});
  std::vector<bool> sparse(static_cast<size_t>(layers));
  for (int64_t i = 0; i < layers; ++i) {
    sparse[i] = std::find(mlp_only.begin(), mlp_only.end(), i) == mlp_only.end() && experts > 0 &&
                (i + 1) % step == 0;
  }
  return sparse;
}

// Qwen2-MoE and Qwen3-MoE share everything but the shared expert, the attention biases and
// the q/k norms.
CommonConfig import_qwen_moe(ImportGraph& g, const ConfigReader& c, const LayerProgress& on_layer,
                             bool qwen3) {
  const CommonConfig cc =
      read_common(c, {.rms_eps = 1e-6, .rope_theta = 10000.0, .max_position_embeddings = 32768});
  const std::string_view experts_key = c.pick({"num_experts", "num_local_experts"});
  const int64_t experts = c.integer(experts_key);
  if (experts < 0 || experts > kMaxConfigExperts) {
    c.fail(experts_key,
           fmt::format("expected a non-negative integer of at most {}", kMaxConfigExperts));
  }
  const std::vector<bool> sparse = qwen_sparse_layers(c, cc.layers, experts);
  const bool any_sparse = std::find(sparse.begin(), sparse.end(), true) != sparse.end();
  const bool any_dense = std::find(sparse.begin(), sparse.end(), false) != sparse.end();
  const int64_t top_k = any_sparse ? read_top_k(c, experts) : 0;
  const int64_t moe_inter = any_sparse ? c.positive("moe_intermediate_size") : 0;
  const int64_t dense_inter = any_dense ? c.positive("intermediate_size") : 0;
  const int64_t shared_inter =
      !qwen3 && any_sparse ? c.positive("shared_expert_intermediate_size") : 0;
  const bool norm_topk = c.boolean_or("norm_topk_prob", false);

  // Sliding windows: Qwen2-MoE per layer_types (computed as transformers does when absent);
  // Qwen3-MoE on every layer when use_sliding_window.
  std::vector<LayerAttention> masks(static_cast<size_t>(cc.layers));
  const bool use_sliding = c.boolean_or("use_sliding_window", false);
  if (!qwen3) {
    if (const auto types = c.strings_opt("layer_types")) {
      masks = layer_attention_from_types(c, *types, cc.layers);
    } else if (use_sliding) {
      const int64_t max_window_layers = c.integer_or("max_window_layers", 28);
      for (int64_t i = 0; i < cc.layers; ++i) {
        if ((i + 1) % 2 != 0 && i < max_window_layers)
          masks[i].sliding_window = c.positive("sliding_window");
      }
    }
  } else if (use_sliding && c.has("sliding_window")) {
    for (LayerAttention& m : masks) m.sliding_window = c.positive("sliding_window");
  }
  const bool attention_bias = c.boolean_or("attention_bias", false);
  const bool qkv_bias = qwen3 ? attention_bias : c.boolean_or("qkv_bias", true);

  DecoderSkeleton s;
  s.on_layer = on_layer;
  s.attention = [&](int layer, const std::string& x) {
    StandardAttention a = base_attention(cc, layer);
    a.qkv_bias = qkv_bias;
    a.o_bias = qwen3 && attention_bias;
    if (qwen3) a.qk_norm = QkNorm::kPerHead;
    a.mask = masks[layer];
    return standard_attention(g, node_name(layer, "attn"), a, x);
  };
  s.ffn = [&](int layer, const std::string& x) {
    const std::string mlp = layer_prefix(layer) + "mlp.";
    if (!sparse[layer]) {
      return dense_mlp(g, node_name(layer, "mlp"), mlp, cc.hidden, dense_inter, x);
    }
    MoeInputs in = per_expert_weights(g, mlp, experts, moe_inter, cc.hidden, "gate_proj", "up_proj",
                                      "down_proj");
    in.router_weight = g.weight(mlp + "gate.weight", {experts, cc.hidden});
    proto::MoEParams p = moe_params(experts, top_k, cc.hidden, moe_inter);
    p.mutable_routing()->set_method(proto::SOFTMAX_TOPK);
    p.mutable_routing()->set_renormalize(norm_topk);
    if (shared_inter > 0) {
      const std::string sh = mlp + "shared_expert.";
      in.shared_gate = g.weight(sh + "gate_proj.weight", {shared_inter, cc.hidden});
      in.shared_up = g.weight(sh + "up_proj.weight", {shared_inter, cc.hidden});
      in.shared_down = g.weight(sh + "down_proj.weight", {cc.hidden, shared_inter});
      in.shared_expert_gate = g.weight(mlp + "shared_expert_gate.weight", {1, cc.hidden});
      p.mutable_shared()->set_intermediate_size(shared_inter);
      p.mutable_shared()->set_has_gate(true);
    }
    return moe(g, node_name(layer, "moe"), x, p, in);
  };
  build_decoder(g, cc, s);
  return cc;
}

}  // namespace

int64_t read_top_k(const ConfigReader& c, int64_t experts, std::string_view key) {
  const int64_t k = c.integer(key);
  if (k < 1 || k > experts) {
    c.fail(key, fmt::format("{} experts per token is outside [1, {}] (the number of experts)", k,
                            experts));
  }
  return k;
}

CommonConfig import_mixtral(ImportGraph& g, const ConfigReader& c, const LayerProgress& on_layer) {
  const CommonConfig cc =
      read_common(c, {.rms_eps = 1e-5, .rope_theta = 1e6, .max_position_embeddings = 4096 * 32});
  const int64_t experts =
      c.positive(c.pick({"num_local_experts", "num_experts"}), kMaxConfigExperts);
  const int64_t top_k = read_top_k(c, experts);
  const int64_t inter = c.positive("intermediate_size");
  const int64_t window = c.integer_or("sliding_window", 0);
  if (window < 0) c.fail("sliding_window", "expected a positive integer or null");

  DecoderSkeleton s;
  s.on_layer = on_layer;
  s.attention = [&](int layer, const std::string& x) {
    StandardAttention a = base_attention(cc, layer);
    a.mask.sliding_window = window;
    return standard_attention(g, node_name(layer, "attn"), a, x);
  };
  s.ffn = [&](int layer, const std::string& x) {
    const std::string block = layer_prefix(layer) + "block_sparse_moe.";
    MoeInputs in = per_expert_weights(g, block, experts, inter, cc.hidden, "w1", "w3", "w2");
    in.router_weight = g.weight(block + "gate.weight", {experts, cc.hidden});
    proto::MoEParams p = moe_params(experts, top_k, cc.hidden, inter);
    p.mutable_routing()->set_method(proto::SOFTMAX_TOPK);
    p.mutable_routing()->set_renormalize(true);  // Mixtral always renormalises
    return moe(g, node_name(layer, "moe"), x, p, in);
  };
  build_decoder(g, cc, s);
  return cc;
}

CommonConfig import_qwen2_moe(ImportGraph& g, const ConfigReader& c,
                              const LayerProgress& on_layer) {
  return import_qwen_moe(g, c, on_layer, /*qwen3=*/false);
}

CommonConfig import_qwen3_moe(ImportGraph& g, const ConfigReader& c,
                              const LayerProgress& on_layer) {
  return import_qwen_moe(g, c, on_layer, /*qwen3=*/true);
}

CommonConfig import_olmoe(ImportGraph& g, const ConfigReader& c, const LayerProgress& on_layer) {
  const CommonConfig cc =
      read_common(c, {.rms_eps = 1e-5, .rope_theta = 10000.0, .max_position_embeddings = 4096});
  const int64_t experts =
      c.positive(c.pick({"num_experts", "num_local_experts"}), kMaxConfigExperts);
  const int64_t top_k = read_top_k(c, experts);
  const int64_t inter = c.positive("intermediate_size");
  const bool norm_topk = c.boolean_or("norm_topk_prob", false);
  const bool bias = c.boolean_or("attention_bias", false);
  const std::optional<double> clip = c.number_opt("clip_qkv");
  if (clip && !(*clip > 0.0)) c.fail("clip_qkv", "expected a positive number or null");
  if (clip) positive_float_param(c, "clip_qkv", *clip);

  DecoderSkeleton s;
  s.on_layer = on_layer;
  s.attention = [&](int layer, const std::string& x) {
    StandardAttention a = base_attention(cc, layer);
    a.qkv_bias = a.o_bias = bias;
    a.qk_norm = QkNorm::kFullWidth;
    if (clip) a.clip_qkv = static_cast<float>(*clip);
    return standard_attention(g, node_name(layer, "attn"), a, x);
  };
  s.ffn = [&](int layer, const std::string& x) {
    const std::string mlp = layer_prefix(layer) + "mlp.";
    MoeInputs in =
        per_expert_weights(g, mlp, experts, inter, cc.hidden, "gate_proj", "up_proj", "down_proj");
    in.router_weight = g.weight(mlp + "gate.weight", {experts, cc.hidden});
    proto::MoEParams p = moe_params(experts, top_k, cc.hidden, inter);
    p.mutable_routing()->set_method(proto::SOFTMAX_TOPK);
    p.mutable_routing()->set_renormalize(norm_topk);
    return moe(g, node_name(layer, "moe"), x, p, in);
  };
  build_decoder(g, cc, s);
  return cc;
}

// Granite-MoE and GraniteMoeShared ("granitemoeshared": shared_intermediate_size > 0 adds an
// ungated shared MLP whose input_linear fuses gate and up rows).
CommonConfig import_granitemoe(ImportGraph& g, const ConfigReader& c,
                               const LayerProgress& on_layer) {
  const CommonConfig cc =
      read_common(c, {.rms_eps = 1e-6, .rope_theta = 10000.0, .max_position_embeddings = 2048});
  const int64_t experts = c.positive("num_local_experts", kMaxConfigExperts);
  const int64_t top_k = read_top_k(c, experts);
  const int64_t inter = c.positive("intermediate_size");
  const int64_t shared_inter = c.integer_or("shared_intermediate_size", 0);
  if (shared_inter < 0) c.fail("shared_intermediate_size", "expected a non-negative integer");
  const bool bias = c.boolean_or("attention_bias", false);
  const auto multiplier = [&](const char* key) {
    const float v = finite_float_param(c, key, c.number_or(key, 1.0));
    if (v == 0.0f) c.fail(key, "expected a finite non-zero number");
    return v;
  };
  const float attention_multiplier = multiplier("attention_multiplier");

  DecoderSkeleton s;
  s.on_layer = on_layer;
  s.embedding_scale = multiplier("embedding_multiplier");
  s.residual_scale = multiplier("residual_multiplier");
  s.logits_scale = 1.0f / multiplier("logits_scaling");
  s.attention = [&](int layer, const std::string& x) {
    StandardAttention a = base_attention(cc, layer);
    a.qkv_bias = a.o_bias = bias;
    a.scale = attention_multiplier;
    return standard_attention(g, node_name(layer, "attn"), a, x);
  };
  s.ffn = [&](int layer, const std::string& x) {
    const std::string block = layer_prefix(layer) + "block_sparse_moe.";
    MoeInputs in;
    // transformers >= 5.17 renames these in memory; checkpoints keep the legacy names, but
    // accept either spelling.
    const std::string router =
        g.has(block + "router.layer.weight") || !g.has(block + "router.weight")
            ? block + "router.layer.weight"
            : block + "router.weight";
    in.router_weight = g.weight(router, {experts, cc.hidden});
    const bool fused_v5 =
        !g.has(block + "input_linear.weight") && g.has(block + "experts.gate_up_proj");
    in.w13 = g.weight(fused_v5 ? block + "experts.gate_up_proj" : block + "input_linear.weight",
                      {experts, 2 * inter, cc.hidden});
    in.w2 = g.weight(fused_v5 ? block + "experts.down_proj" : block + "output_linear.weight",
                     {experts, cc.hidden, inter});
    proto::MoEParams p = moe_params(experts, top_k, cc.hidden, inter);
    p.mutable_routing()->set_method(proto::TOPK_SOFTMAX);
    if (shared_inter > 0) {
      const std::string sh = layer_prefix(layer) + "shared_mlp.";
      const std::string fused = sh + "input_linear.weight";
      const Shape fused_shape{2 * shared_inter, cc.hidden};
      in.shared_gate = g.assembled(sh + "input_linear.gate.weight", {shared_inter, cc.hidden},
                                   {{fused, fused_shape, 0, shared_inter}});
      in.shared_up = g.assembled(sh + "input_linear.up.weight", {shared_inter, cc.hidden},
                                 {{fused, fused_shape, shared_inter, 2 * shared_inter}});
      in.shared_down = g.weight(sh + "output_linear.weight", {cc.hidden, shared_inter});
      p.mutable_shared()->set_intermediate_size(shared_inter);
    }
    return moe(g, node_name(layer, "moe"), x, p, in);
  };
  build_decoder(g, cc, s);
  return cc;
}

}  // namespace mg
