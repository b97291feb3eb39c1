// DeepSeek-V2 (incl. V2-Lite: q_lora_rank null; greedy and group_limited_greedy routing) and
// DeepSeek-V3 (noaux_tc: sigmoid scores, score-correction bias, sum-of-top-2 groups), both with
// multi-head latent attention, YaRN with the mscale² softmax scale, fused shared experts and
// dense first layers (first_k_dense_replace).
#include <cmath>

#include "framework/core/error.h"
#include "framework/import/decoder_blocks.h"
#include "framework/import/hf_families.h"

namespace mg {

namespace {

struct DeepseekConfig {
  CommonConfig common;
  int64_t experts = 0;
  int64_t top_k = 0;
  int64_t moe_inter = 0;
  int64_t dense_inter = 0;
  int64_t shared_inter = 0;
  int64_t first_dense = 0;
  float routed_scaling_factor = 1.0f;
  MlaAttention mla;  // prefix filled per layer
};

DeepseekConfig read_deepseek(const ConfigReader& c, double default_scaling_factor,
                             int64_t default_first_dense) {
  DeepseekConfig d;
  d.common =
      read_common(c, {.rms_eps = 1e-6, .rope_theta = 10000.0, .max_position_embeddings = 4096});
  const CommonConfig& cc = d.common;
  d.experts = c.positive(c.pick({"n_routed_experts", "num_local_experts", "num_experts"}),
                         kMaxConfigExperts);
  d.top_k = read_top_k(c, d.experts);
  d.moe_inter = c.positive("moe_intermediate_size");
  d.first_dense = c.integer_or("first_k_dense_replace", default_first_dense);
  if (d.first_dense < 0) c.fail("first_k_dense_replace", "expected a non-negative integer");
  if (d.first_dense > 0) d.dense_inter = c.positive("intermediate_size");
  const int64_t shared_experts = c.integer_or("n_shared_experts", 0);
  if (shared_experts < 0 || shared_experts > kMaxConfigExperts) {
    c.fail("n_shared_experts",
           fmt::format("expected a non-negative integer of at most {}", kMaxConfigExperts));
  }
  d.shared_inter = d.moe_inter * shared_experts;  // <= 2^24 * 2^16: no overflow
  d.routed_scaling_factor = positive_float_param(
      c, "routed_scaling_factor", c.number_or("routed_scaling_factor", default_scaling_factor));

  MlaAttention& a = d.mla;
  a.hidden = cc.hidden;
  a.heads = cc.heads;
  // q_lora_rank: null means no query compression (V2-Lite); a missing key is an error rather
  // than transformers' silent default of 1536.
  if (!c.json().contains("q_lora_rank")) {
    c.fail("q_lora_rank", "missing (expected an integer, or null for no query compression)");
  }
  a.q_lora_rank = c.integer_opt("q_lora_rank").value_or(0);
  if (a.q_lora_rank < 0) c.fail("q_lora_rank", "expected a positive integer or null");
  a.kv_lora_rank = c.positive("kv_lora_rank");
  a.nope_dim = c.positive("qk_nope_head_dim");
  a.rope_dim = c.positive("qk_rope_head_dim");
  a.v_dim = c.positive("v_head_dim");
  a.bias = c.boolean_or("attention_bias", false);
  // Softmax scale: qk_head_dim^-0.5, times mscale(factor, mscale_all_dim)^2 for scaled RoPE.
  double scale = 1.0 / std::sqrt(static_cast<double>(a.nope_dim + a.rope_dim));
  if (cc.rope.type != "default" && cc.rope.mscale_all_dim != 0.0) {
    const double m = yarn_mscale(cc.rope.factor, cc.rope.mscale_all_dim);
    scale *= m * m;
  }
  a.scale = static_cast<float>(scale);
  return d;
}

// The layers and the dense FFN are the same for V2 and V3; `routing` fills the MoE routing and
// may add the score-correction bias.
CommonConfig build_deepseek(
    ImportGraph& g, const DeepseekConfig& d, const LayerProgress& on_layer,
    const std::function<void(const std::string& mlp, proto::MoEParams&, MoeInputs&)>& routing) {
  const CommonConfig& cc = d.common;
  DecoderSkeleton s;
  s.on_layer = on_layer;
  s.attention = [&](int layer, const std::string& x) {
    MlaAttention a = d.mla;
    a.prefix = fmt::format("model.layers.{}.self_attn.", layer);
    a.rope = &cc.rope;
    return mla_attention(g, fmt::format("layers.{}.attn", layer), a, x);
  };
  s.ffn = [&](int layer, const std::string& x) {
    const std::string mlp = fmt::format("model.layers.{}.mlp.", layer);
    const std::string node = fmt::format("layers.{}", layer);
    if (layer < d.first_dense) return dense_mlp(g, node + ".mlp", mlp, cc.hidden, d.dense_inter, x);
    MoeInputs in;
    in.router_weight = g.weight(mlp + "gate.weight", {d.experts, cc.hidden});
    in.w13 = stack_w13(
        g, mlp + "experts.w13", d.experts, d.moe_inter, cc.hidden, [&](int64_t e, bool gate) {
          return fmt::format("{}experts.{}.{}.weight", mlp, e, gate ? "gate_proj" : "up_proj");
        });
    in.w2 = stack_w2(g, mlp + "experts.w2", d.experts, d.moe_inter, cc.hidden, [&](int64_t e) {
      return fmt::format("{}experts.{}.down_proj.weight", mlp, e);
    });
    proto::MoEParams p;
    p.set_num_experts(d.experts);
    p.set_top_k(d.top_k);
    p.set_hidden_size(cc.hidden);
    p.set_intermediate_size(d.moe_inter);
    p.set_activation(proto::SILU_GATED);
    if (d.routed_scaling_factor != 1.0f) {
      p.mutable_routing()->set_routed_scaling_factor(d.routed_scaling_factor);
    }
    routing(mlp, p, in);
    if (d.shared_inter > 0) {
      // n_shared_experts fused into one MLP (note the plural "shared_experts").
      const std::string sh = mlp + "shared_experts.";
      in.shared_gate = g.weight(sh + "gate_proj.weight", {d.shared_inter, cc.hidden});
      in.shared_up = g.weight(sh + "up_proj.weight", {d.shared_inter, cc.hidden});
      in.shared_down = g.weight(sh + "down_proj.weight", {cc.hidden, d.shared_inter});
      p.mutable_shared()->set_intermediate_size(d.shared_inter);
    }
    return moe(g, node + ".moe", x, p, in);
  };
  build_decoder(g, cc, s);
  return cc;
}

void read_groups(const ConfigReader& c, int64_t experts, int64_t top_k,
                 proto::MoERoutingParams& r) {
  const int64_t groups = c.positive("n_group");
  const int64_t kept = c.positive("topk_group");
  if (experts % groups != 0) {
    c.fail("n_group", fmt::format("{} groups do not divide the {} experts", groups, experts));
  }
  if (kept > groups) {
    c.fail("topk_group", fmt::format("keeps {} groups of only {}", kept, groups));
  }
  if (top_k > kept * (experts / groups)) {
    c.fail("topk_group", fmt::format("the {} kept groups of {} experts hold fewer than "
                                     "num_experts_per_tok = {} experts",
                                     kept, experts / groups, top_k));
  }
  r.set_num_groups(groups);
  r.set_groups_kept(kept);
}

}  // namespace

CommonConfig import_deepseek_v2(ImportGraph& g, const ConfigReader& c,
                                const LayerProgress& on_layer) {
  DeepseekConfig d = read_deepseek(c, 1.0, 0);
  d.mla.pairing = proto::INTERLEAVED;  // complex-multiply RoPE
  const std::string method = c.string_or("topk_method", "greedy");
  if (method != "greedy" && method != "group_limited_greedy") {
    c.fail("topk_method", fmt::format("'{}' is not supported for DeepSeek-V2 (expected greedy or "
                                      "group_limited_greedy)",
                                      method));
  }
  return build_deepseek(g, d, on_layer, [&](const std::string&, proto::MoEParams& p, MoeInputs&) {
    // transformers never renormalises DeepSeek-V2 weights (norm_topk_prob is ignored).
    proto::MoERoutingParams& r = *p.mutable_routing();
    if (method == "greedy") {
      r.set_method(proto::SOFTMAX_TOPK);
    } else {
      r.set_method(proto::GROUPED_TOPK);
      r.set_score_function(proto::MOE_SCORE_SOFTMAX);
      r.set_group_score(proto::MOE_GROUP_MAX);
      read_groups(c, d.experts, d.top_k, r);
    }
  });
}

CommonConfig import_deepseek_v3(ImportGraph& g, const ConfigReader& c,
                                const LayerProgress& on_layer) {
  DeepseekConfig d = read_deepseek(c, 2.5, 3);
  // rope_interleave (default true) only permutes dims inside q_rot / k_rot the same way for
  // both, so interleaved pairing gives the same q.k (docs/hf_import.md).
  d.mla.pairing = c.boolean_or("rope_interleave", true) ? proto::INTERLEAVED : proto::HALF_SPLIT;
  const bool renormalize = c.boolean_or("norm_topk_prob", true);
  return build_deepseek(
      g, d, on_layer, [&](const std::string& mlp, proto::MoEParams& p, MoeInputs& in) {
        // noaux_tc, whatever topk_method / scoring_func say (as transformers).
        proto::MoERoutingParams& r = *p.mutable_routing();
        r.set_method(proto::GROUPED_TOPK);
        r.set_score_function(proto::MOE_SCORE_SIGMOID);
        r.set_group_score(proto::MOE_GROUP_SUM_TOP2);
        r.set_renormalize(renormalize);
        read_groups(c, d.experts, d.top_k, r);
        r.set_has_score_correction_bias(true);
        in.score_correction_bias = g.weight(mlp + "gate.e_score_correction_bias", {d.experts});
      });
}

}  // namespace mg
