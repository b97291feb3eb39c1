#include "models/builders/decoder_builder.h"

#include <cmath>

namespace mg {

namespace {

std::string layer_name(int layer, const std::string& what) {
  return fmt::format("layers.{}.{}", layer, what);
}

float init_spread(int64_t fan_in) {
  return 1.0f / std::sqrt(static_cast<float>(fan_in));
}

std::string linear(GraphBuilder& b, const std::string& name, const std::string& x, int64_t in,
                   int64_t out, bool bias) {
  const std::string w = b.weight(name + ".weight", {out, in}, init_spread(in));
  const std::string bias_name = bias ? b.weight(name + ".bias", {out}, 0.1f) : "";
  proto::Node& n = b.node(name, "linear", {x, w, bias_name}, {name + ".out"});
  n.mutable_linear()->set_has_bias(bias);
  return name + ".out";
}

std::string rms_norm(GraphBuilder& b, const std::string& name, const std::string& x, int64_t dim,
                     int64_t group, float eps) {
  const std::string w = b.weight(name + ".weight", {group ? group : dim}, 0.1f, 1.0f);
  proto::Node& n = b.node(name, "rms_norm", {x, w}, {name + ".out"});
  n.mutable_rms_norm()->set_eps(eps);
  n.mutable_rms_norm()->set_group_size(group);
  n.mutable_rms_norm()->set_has_weight(true);
  return name + ".out";
}

std::string rope(GraphBuilder& b, const std::string& name, const std::string& x, int64_t heads,
                 const DecoderSpec& spec) {
  proto::Node& n = b.node(name, "rope", {x, "positions"}, {name + ".out"});
  proto::RopeParams* p = n.mutable_rope();
  p->set_num_heads(heads);
  p->set_head_dim(spec.head_dim);
  p->set_pairing(proto::HALF_SPLIT);
  p->set_theta(spec.rope_theta);
  return name + ".out";
}

std::string attention_block(GraphBuilder& b, const DecoderSpec& spec, int layer,
                            const std::string& x) {
  const int64_t q_dim = spec.heads * spec.head_dim;
  const int64_t kv_dim = spec.kv_heads * spec.head_dim;
  std::string q = linear(b, layer_name(layer, "attn.q_proj"), x, spec.hidden, q_dim, spec.qkv_bias);
  std::string k =
      linear(b, layer_name(layer, "attn.k_proj"), x, spec.hidden, kv_dim, spec.qkv_bias);
  std::string v =
      linear(b, layer_name(layer, "attn.v_proj"), x, spec.hidden, kv_dim, spec.qkv_bias);
  if (spec.qk_norm) {
    q = rms_norm(b, layer_name(layer, "attn.q_norm"), q, q_dim, spec.head_dim, spec.rms_eps);
    k = rms_norm(b, layer_name(layer, "attn.k_norm"), k, kv_dim, spec.head_dim, spec.rms_eps);
  }
  q = rope(b, layer_name(layer, "attn.q_rope"), q, spec.heads, spec);
  k = rope(b, layer_name(layer, "attn.k_rope"), k, spec.kv_heads, spec);
  const std::string sinks =
      spec.sinks ? b.weight(layer_name(layer, "attn.sinks"), {spec.heads}, 0.5f) : "";
  const std::string name = layer_name(layer, "attn");
  proto::Node& n = b.node(name, "attention", {q, k, v, "positions", sinks}, {name + ".out"});
  proto::AttentionParams* p = n.mutable_attention();
  p->set_num_heads(spec.heads);
  p->set_num_kv_heads(spec.kv_heads);
  p->set_head_dim(spec.head_dim);
  p->set_has_sinks(spec.sinks);
  if (spec.sliding_window > 0 && layer % 2 == 0) p->set_sliding_window(spec.sliding_window);
  return linear(b, layer_name(layer, "attn.o_proj"), name + ".out", q_dim, spec.hidden,
                spec.qkv_bias);
}

std::string add(GraphBuilder& b, const std::string& name, const std::string& a,
                const std::string& c) {
  b.node(name, "add", {a, c}, {name + ".out"}).mutable_add();
  return name + ".out";
}

void dense_configure(DecoderSpec&) {}

}  // namespace

std::string dense_ffn(GraphBuilder& b, const DecoderSpec& spec, int layer, const std::string& x) {
  const std::string name = layer_name(layer, "mlp");
  const std::string gate = b.weight(name + ".gate_proj.weight", {spec.intermediate, spec.hidden},
                                    init_spread(spec.hidden));
  const std::string up = b.weight(name + ".up_proj.weight", {spec.intermediate, spec.hidden},
                                  init_spread(spec.hidden));
  const std::string down = b.weight(name + ".down_proj.weight", {spec.hidden, spec.intermediate},
                                    init_spread(spec.intermediate));
  proto::Node& n = b.node(name, "gated_mlp", {x, gate, up, down}, {name + ".out"});
  n.mutable_gated_mlp()->set_activation(proto::SILU_GATED);
  return name + ".out";
}

const std::vector<Family>& families() {
  static const std::vector<Family> all = [] {
    std::vector<Family> f;
    f.push_back({"llama", "dense Llama-style decoder (SiLU gated MLP, GQA, RoPE)", dense_configure,
                 dense_ffn});
    add_moe_families(f);
    return f;
  }();
  return all;
}

const Family& find_family(const std::string& name) {
  std::vector<std::string> names;
  for (const Family& f : families()) {
    if (f.name == name) return f;
    names.push_back(f.name);
  }
  MG_FAIL("unknown model family '{}' (known: {})", name, fmt::join(names, ", "));
}

GraphBuilder build_decoder(const DecoderSpec& spec, bool graph_only) {
  MG_CHECK(spec.vocab > 0 && spec.hidden > 0 && spec.layers > 0 && spec.heads > 0 &&
               spec.kv_heads > 0 && spec.head_dim > 0 && spec.intermediate > 0 &&
               spec.max_seq_len > 0,
           "model sizes must all be positive");
  MG_CHECK(spec.heads % spec.kv_heads == 0, "heads ({}) must be a multiple of kv-heads ({})",
           spec.heads, spec.kv_heads);
  MG_CHECK(spec.head_dim % 2 == 0, "head-dim must be even for RoPE, got {}", spec.head_dim);
  const Family& family = find_family(spec.family);
  GraphBuilder b(fmt::format("tiny-{}", spec.family), spec.seed, spec.weight_dtype);
  b.set_graph_only(graph_only);
  proto::ModelInfo* info = b.model().mutable_info();
  info->set_family(spec.family);
  info->set_vocab_size(spec.vocab);
  info->set_max_seq_len(spec.max_seq_len);
  info->set_eos_token_id(spec.eos_token_id);

  b.input("token_ids", proto::I32, {-1});
  b.input("positions", proto::I32, {-1});
  b.output("logits", proto::F32, {-1, spec.vocab});

  const std::string embed = b.weight("embed_tokens.weight", {spec.vocab, spec.hidden}, 1.0f);
  b.node("embed", "embedding", {"token_ids", embed}, {"embed.out"}).mutable_embedding();
  std::string h = "embed.out";
  for (int layer = 0; layer < spec.layers; ++layer) {
    const std::string normed =
        rms_norm(b, layer_name(layer, "input_norm"), h, spec.hidden, 0, spec.rms_eps);
    h = add(b, layer_name(layer, "attn_residual"), h, attention_block(b, spec, layer, normed));
    const std::string normed2 =
        rms_norm(b, layer_name(layer, "post_attn_norm"), h, spec.hidden, 0, spec.rms_eps);
    const std::string ffn = layer < spec.first_dense_layers ? dense_ffn(b, spec, layer, normed2)
                                                            : family.ffn(b, spec, layer, normed2);
    h = add(b, layer_name(layer, "ffn_residual"), h, ffn);
  }
  h = rms_norm(b, "final_norm", h, spec.hidden, 0, spec.rms_eps);
  const std::string lm_head =
      spec.tie_embeddings
          ? embed
          : b.weight("lm_head.weight", {spec.vocab, spec.hidden}, init_spread(spec.hidden));
  b.node("lm_head", "linear", {h, lm_head, ""}, {"logits"}).mutable_linear();
  return b;
}

}  // namespace mg
