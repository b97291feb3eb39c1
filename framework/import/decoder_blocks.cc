#include "framework/import/decoder_blocks.h"

#include <cmath>

#include "framework/core/error.h"

namespace mg {

namespace {

std::string bias_if(ImportGraph& g, bool present, const std::string& key, int64_t size) {
  return present ? g.weight(key, {size}) : "";
}

std::string rope(ImportGraph& g, const std::string& name, const std::string& x,
                 const RopeConfig& rope, proto::RopePairing pairing, int64_t heads,
                 int64_t head_dim, int64_t rotary_dim = 0, int64_t offset = 0) {
  proto::Node& n = g.node(name, "rope", {x, "positions"});
  proto::RopeParams* p = n.mutable_rope();
  p->set_num_heads(heads);
  p->set_head_dim(head_dim);
  p->set_rotary_dim(rotary_dim);
  p->set_rotary_offset(offset);
  p->set_pairing(pairing);
  p->set_theta(rope.theta);
  *p->mutable_scaling() = rope.scaling;
  return name + ".out";
}

std::string clamp(ImportGraph& g, const std::string& name, const std::string& x, float limit) {
  proto::Node& n = g.node(name, "clamp", {x});
  n.mutable_clamp()->set_min(-limit);
  n.mutable_clamp()->set_max(limit);
  return name + ".out";
}

}  // namespace

std::string standard_attention(ImportGraph& g, const std::string& node, const StandardAttention& a,
                               const std::string& x) {
  const std::string& p = a.prefix;
  const int64_t q_dim = a.heads * a.head_dim;
  const int64_t kv_dim = a.kv_heads * a.head_dim;
  std::string q = g.linear(node + ".q_proj", x, g.weight(p + "q_proj.weight", {q_dim, a.hidden}),
                           bias_if(g, a.qkv_bias, p + "q_proj.bias", q_dim));
  std::string k = g.linear(node + ".k_proj", x, g.weight(p + "k_proj.weight", {kv_dim, a.hidden}),
                           bias_if(g, a.qkv_bias, p + "k_proj.bias", kv_dim));
  std::string v = g.linear(node + ".v_proj", x, g.weight(p + "v_proj.weight", {kv_dim, a.hidden}),
                           bias_if(g, a.qkv_bias, p + "v_proj.bias", kv_dim));
  switch (a.qk_norm) {
    case QkNorm::kNone:
      break;
    case QkNorm::kPerHead:
      q = g.rms_norm(node + ".q_norm", q, g.weight(p + "q_norm.weight", {a.head_dim}), a.norm_eps,
                     a.head_dim);
      k = g.rms_norm(node + ".k_norm", k, g.weight(p + "k_norm.weight", {a.head_dim}), a.norm_eps,
                     a.head_dim);
      break;
    case QkNorm::kFullWidth:
      q = g.rms_norm(node + ".q_norm", q, g.weight(p + "q_norm.weight", {q_dim}), a.norm_eps);
      k = g.rms_norm(node + ".k_norm", k, g.weight(p + "k_norm.weight", {kv_dim}), a.norm_eps);
      break;
  }
  if (a.clip_qkv) {
    q = clamp(g, node + ".q_clip", q, *a.clip_qkv);
    k = clamp(g, node + ".k_clip", k, *a.clip_qkv);
    v = clamp(g, node + ".v_clip", v, *a.clip_qkv);
  }
  if (a.rope) {
    q = rope(g, node + ".q_rope", q, *a.rope, a.pairing, a.heads, a.head_dim);
    k = rope(g, node + ".k_rope", k, *a.rope, a.pairing, a.kv_heads, a.head_dim);
  }
  if (a.l2_qk_norm) {
    q = g.rms_norm(node + ".q_l2norm", q, "", a.norm_eps, a.head_dim);
    k = g.rms_norm(node + ".k_l2norm", k, "", a.norm_eps, a.head_dim);
  }
  if (a.temperature) {
    proto::Node& n = g.node(node + ".q_temperature", "attn_temperature", {q, "positions"});
    n.mutable_attn_temperature()->set_attn_scale(a.temperature->first);
    n.mutable_attn_temperature()->set_floor_scale(a.temperature->second);
    q = node + ".q_temperature.out";
  }
  const std::string sinks = a.sinks ? g.weight(p + "sinks", {a.heads}) : "";
  proto::Node& n = g.node(node, "attention", {q, k, v, "positions", sinks});
  proto::AttentionParams* ap = n.mutable_attention();
  ap->set_num_heads(a.heads);
  ap->set_num_kv_heads(a.kv_heads);
  ap->set_head_dim(a.head_dim);
  if (a.scale) ap->set_scale(*a.scale);
  ap->set_sliding_window(a.mask.sliding_window);
  ap->set_chunk_size(a.mask.chunk_size);
  ap->set_has_sinks(a.sinks);
  return g.linear(node + ".o_proj", node + ".out", g.weight(p + "o_proj.weight", {a.hidden, q_dim}),
                  bias_if(g, a.o_bias, p + "o_proj.bias", a.hidden));
}

std::string mla_attention(ImportGraph& g, const std::string& node, const MlaAttention& a,
                          const std::string& x) {
  MG_ASSERT(a.rope != nullptr, "MLA without RoPE");
  const std::string& p = a.prefix;
  const int64_t qk_dim = a.nope_dim + a.rope_dim;
  const int64_t kv_a_rows = a.kv_lora_rank + a.rope_dim;
  // q [T, heads * (nope + rope)], RoPE on the tail of each head.
  std::string q;
  if (a.q_lora_rank > 0) {
    std::string qa =
        g.linear(node + ".q_a_proj", x, g.weight(p + "q_a_proj.weight", {a.q_lora_rank, a.hidden}),
                 bias_if(g, a.bias, p + "q_a_proj.bias", a.q_lora_rank));
    qa = g.rms_norm(node + ".q_a_layernorm", qa,
                    g.weight(p + "q_a_layernorm.weight", {a.q_lora_rank}), a.lora_norm_eps);
    q = g.linear(node + ".q_b_proj", qa,
                 g.weight(p + "q_b_proj.weight", {a.heads * qk_dim, a.q_lora_rank}));
  } else {
    q = g.linear(node + ".q_proj", x, g.weight(p + "q_proj.weight", {a.heads * qk_dim, a.hidden}));
  }
  q = rope(g, node + ".q_rope", q, *a.rope, a.pairing, a.heads, qk_dim, a.rope_dim, a.nope_dim);

  // kv_a_proj_with_mqa rows: [latent (kv_lora_rank) | shared rope key (rope_dim)], taken apart
  // as two weights so no activation has to be split.
  const std::string kv_a = p + "kv_a_proj_with_mqa.weight";
  const Shape kv_a_shape{kv_a_rows, a.hidden};
  const std::string latent_w =
      g.assembled(p + "kv_a_proj_with_mqa.latent.weight", {a.kv_lora_rank, a.hidden},
                  {{kv_a, kv_a_shape, 0, a.kv_lora_rank}});
  const std::string k_rope_w =
      g.assembled(p + "kv_a_proj_with_mqa.k_rope.weight", {a.rope_dim, a.hidden},
                  {{kv_a, kv_a_shape, a.kv_lora_rank, kv_a_rows}});
  std::string latent_b, k_rope_b;
  if (a.bias) {
    const std::string kv_a_b = p + "kv_a_proj_with_mqa.bias";
    latent_b = g.assembled(p + "kv_a_proj_with_mqa.latent.bias", {a.kv_lora_rank},
                           {{kv_a_b, {kv_a_rows}, 0, a.kv_lora_rank}});
    k_rope_b = g.assembled(p + "kv_a_proj_with_mqa.k_rope.bias", {a.rope_dim},
                           {{kv_a_b, {kv_a_rows}, a.kv_lora_rank, kv_a_rows}});
  }
  std::string latent = g.linear(node + ".kv_a_latent", x, latent_w, latent_b);
  latent = g.rms_norm(node + ".kv_a_layernorm", latent,
                      g.weight(p + "kv_a_layernorm.weight", {a.kv_lora_rank}), a.lora_norm_eps);
  std::string k_rope = g.linear(node + ".kv_a_k_rope", x, k_rope_w, k_rope_b);
  k_rope = rope(g, node + ".k_rope", k_rope, *a.rope, a.pairing, 1, a.rope_dim);

  // kv_b_proj rows, per head: [k_nope (nope_dim) | v (v_dim)]; split into a k_nope weight and a
  // v weight, each gathering its rows of every head.
  const std::string kv_b = p + "kv_b_proj.weight";
  const Shape kv_b_shape{a.heads * (a.nope_dim + a.v_dim), a.kv_lora_rank};
  std::vector<PartRef> k_rows, v_rows;
  for (int64_t h = 0; h < a.heads; ++h) {
    const int64_t first = h * (a.nope_dim + a.v_dim);
    k_rows.push_back({kv_b, kv_b_shape, first, first + a.nope_dim});
    v_rows.push_back({kv_b, kv_b_shape, first + a.nope_dim, first + a.nope_dim + a.v_dim});
  }
  const std::string k_nope = g.linear(
      node + ".kv_b_k_nope", latent,
      g.assembled(p + "kv_b_proj.k_nope.weight", {a.heads * a.nope_dim, a.kv_lora_rank}, k_rows));
  const std::string v =
      g.linear(node + ".kv_b_v", latent,
               g.assembled(p + "kv_b_proj.v.weight", {a.heads * a.v_dim, a.kv_lora_rank}, v_rows));

  proto::Node& cat = g.node(node + ".k", "concat_heads", {k_nope, k_rope});
  cat.mutable_concat_heads()->set_num_heads(a.heads);
  cat.mutable_concat_heads()->set_a_head_dim(a.nope_dim);
  cat.mutable_concat_heads()->set_b_head_dim(a.rope_dim);

  proto::Node& n = g.node(node, "attention", {q, node + ".k.out", v, "positions"});
  proto::AttentionParams* ap = n.mutable_attention();
  ap->set_num_heads(a.heads);
  ap->set_num_kv_heads(a.heads);
  ap->set_head_dim(qk_dim);
  ap->set_v_head_dim(a.v_dim);
  ap->set_scale(a.scale);
  return g.linear(node + ".o_proj", node + ".out",
                  g.weight(p + "o_proj.weight", {a.hidden, a.heads * a.v_dim}),
                  bias_if(g, a.bias, p + "o_proj.bias", a.hidden));
}

std::string dense_mlp(ImportGraph& g, const std::string& node, const std::string& prefix,
                      int64_t hidden, int64_t width, const std::string& x,
                      const std::string& gate_name, const std::string& up_name,
                      const std::string& down_name) {
  const std::string gate = g.weight(prefix + gate_name + ".weight", {width, hidden});
  const std::string up = g.weight(prefix + up_name + ".weight", {width, hidden});
  const std::string down = g.weight(prefix + down_name + ".weight", {hidden, width});
  proto::Node& n = g.node(node, "gated_mlp", {x, gate, up, down});
  n.mutable_gated_mlp()->set_activation(proto::SILU_GATED);
  return node + ".out";
}

namespace {

// The MoE quant_scheme of FP8 expert weights with scales `group` (w2's: w13's may be per
// projection in a per-tensor checkpoint).
proto::MoEQuantScheme fp8_scheme(GroupShape group) {
  if (group == GroupShape::per_tensor()) return proto::MOE_QUANT_FP8_PER_TENSOR;
  if (group == GroupShape::per_channel()) return proto::MOE_QUANT_FP8_PER_CHANNEL;
  return proto::MOE_QUANT_FP8_BLOCK;
}

}  // namespace

std::string moe(ImportGraph& g, const std::string& node, const std::string& x,
                const proto::MoEParams& params, const MoeInputs& in) {
  const std::optional<GroupShape> w13_group = g.quant_group(in.w13);
  const std::optional<GroupShape> w2_group = g.quant_group(in.w2);
  MG_CHECK(w13_group.has_value() == w2_group.has_value(),
           "{}: expert weights '{}' ({}) and '{}' ({}) must both be quantized or both unquantized",
           g.checkpoint().dir().string(), in.w13, w13_group ? "quantized" : "not quantized", in.w2,
           w2_group ? "quantized" : "not quantized");
  proto::MoEParams p = params;
  switch (g.quant_element(in.w2)) {
    case proto::QUANT_ELEMENT_INT4:
    case proto::QUANT_ELEMENT_UINT4:
      p.set_quant_scheme(proto::MOE_QUANT_INT4_WEIGHT_ONLY);
      break;
    case proto::QUANT_ELEMENT_INT8:
    case proto::QUANT_ELEMENT_UINT8:
      p.set_quant_scheme(proto::MOE_QUANT_INT8_WEIGHT_ONLY);
      break;
    case proto::QUANT_ELEMENT_FP4_E2M1:
      // A family that declared its experts' scheme itself (GPT-OSS's MXFP4) keeps it; FP4 codes
      // with 16-value groups are NVFP4 (ModelOpt).
      if (w2_group && p.quant_scheme() == proto::MOE_QUANT_UNQUANTIZED) {
        p.set_quant_scheme(w2_group->cols == 32 ? proto::MOE_QUANT_MXFP4 : proto::MOE_QUANT_NVFP4);
      }
      break;
    default:
      if (w2_group && p.quant_scheme() == proto::MOE_QUANT_UNQUANTIZED) {
        p.set_quant_scheme(fp8_scheme(*w2_group));
      }
      break;
  }
  proto::Node& n = g.node(
      node, "moe",
      {x, in.router_weight, in.router_bias, in.score_correction_bias, in.w13, in.w13_bias, in.w2,
       in.w2_bias, in.shared_gate, in.shared_up, in.shared_down, in.shared_expert_gate});
  *n.mutable_moe() = p;
  return node + ".out";
}

std::string stack_w13(ImportGraph& g, const std::string& name, int64_t experts, int64_t inter,
                      int64_t hidden, const std::function<std::string(int64_t, bool gate)>& key) {
  std::vector<PartRef> parts;
  parts.reserve(static_cast<size_t>(2 * experts));
  for (int64_t e = 0; e < experts; ++e) {
    parts.push_back({key(e, true), {inter, hidden}});
    parts.push_back({key(e, false), {inter, hidden}});
  }
  return g.assembled(name, {experts, 2 * inter, hidden}, parts);
}

std::string stack_w2(ImportGraph& g, const std::string& name, int64_t experts, int64_t inter,
                     int64_t hidden, const std::function<std::string(int64_t)>& key) {
  std::vector<PartRef> parts;
  parts.reserve(static_cast<size_t>(experts));
  for (int64_t e = 0; e < experts; ++e) parts.push_back({key(e), {hidden, inter}});
  return g.assembled(name, {experts, hidden, inter}, parts);
}

void build_decoder(ImportGraph& g, const CommonConfig& c, const DecoderSkeleton& s) {
  proto::Model& m = g.model();
  auto add_value = [](google::protobuf::RepeatedPtrField<proto::ValueInfo>* list,
                      const std::string& name, proto::DType dtype, std::vector<int64_t> shape) {
    proto::ValueInfo* v = list->Add();
    v->set_name(name);
    v->set_dtype(dtype);
    for (int64_t d : shape) v->add_shape(d);
  };
  add_value(m.mutable_inputs(), "token_ids", proto::I32, {-1});
  add_value(m.mutable_inputs(), "positions", proto::I32, {-1});
  add_value(m.mutable_outputs(), "logits", proto::F32, {-1, c.vocab});

  const std::string embed = g.weight(s.prefix + "embed_tokens.weight", {c.vocab, c.hidden});
  proto::Node& e = g.node("embed", "embedding", {"token_ids", embed});
  e.mutable_embedding();
  if (s.embedding_scale) e.mutable_embedding()->set_scale(*s.embedding_scale);
  std::string h = "embed.out";
  for (int layer = 0; layer < c.layers; ++layer) {
    const std::string module = fmt::format("{}layers.{}.", s.prefix, layer);
    const std::string node = fmt::format("layers.{}", layer);
    const std::string normed =
        g.rms_norm(node + ".input_layernorm", h,
                   g.weight(module + "input_layernorm.weight", {c.hidden}), c.rms_eps);
    h = g.add(node + ".attn_residual", h, s.attention(layer, normed), s.residual_scale);
    const std::string normed2 =
        g.rms_norm(node + ".post_attention_layernorm", h,
                   g.weight(module + "post_attention_layernorm.weight", {c.hidden}), c.rms_eps);
    h = g.add(node + ".ffn_residual", h, s.ffn(layer, normed2), s.residual_scale);
    if (s.on_layer) s.on_layer(layer, static_cast<int>(c.layers));
  }
  h = g.rms_norm("norm", h, g.weight(s.prefix + "norm.weight", {c.hidden}), c.rms_eps);
  const std::string head = c.tie_embeddings ? embed : g.weight(s.lm_head, {c.vocab, c.hidden});
  proto::Node& lm = g.node("lm_head", "linear", {h, head});
  lm.clear_outputs();
  lm.add_outputs("logits");
  lm.mutable_linear();
  if (s.logits_scale) lm.mutable_linear()->set_scale(*s.logits_scale);
}

}  // namespace mg
