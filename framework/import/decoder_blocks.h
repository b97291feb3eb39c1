// The pieces an imported decoder is assembled from, each a few graph nodes:
//   standard attention (GQA; biases, q/k norms, clip_qkv, RoPE or NoPE, L2 qk-norm, temperature
//   tuning, sliding window / chunks, sinks), DeepSeek MLA, the dense gated MLP, the MoE node, and
//   the decoder skeleton (embedding → layers of pre-norm residual blocks → norm → lm_head).
// Weight names are the checkpoint's; the family code (hf_families*.cc) picks them.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "framework/import/hf_common.h"
#include "framework/import/import_graph.h"

namespace mg {

enum class QkNorm {
  kNone,
  kPerHead,    // Qwen3-MoE: RMSNorm over head_dim with weight [head_dim], before RoPE
  kFullWidth,  // OLMoE: RMSNorm over the whole q / k projection, before RoPE
};

struct StandardAttention {
  std::string prefix;  // module prefix, e.g. "model.layers.3.self_attn."
  int64_t hidden = 0;
  int64_t heads = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;
  bool qkv_bias = false;
  bool o_bias = false;
  QkNorm qk_norm = QkNorm::kNone;
  float norm_eps = 1e-6f;
  std::optional<float> clip_qkv;     // OLMoE: clamp q, k, v to [-clip, clip] after the norms
  const RopeConfig* rope = nullptr;  // null: no RoPE (Llama-4 NoPE layers)
  proto::RopePairing pairing = proto::HALF_SPLIT;
  bool l2_qk_norm = false;  // Llama-4: weightless per-head norm after RoPE
  std::optional<std::pair<float, float>> temperature;  // Llama-4 NoPE: (attn_scale, floor_scale)
  std::optional<float> scale;                          // softmax scale; unset: head_dim^-0.5
  LayerAttention mask;
  bool sinks = false;  // GPT-OSS: "<prefix>sinks" [heads]
};

// Returns the o_proj output [T, hidden]. `node` prefixes node names ("layers.3.attn").
std::string standard_attention(ImportGraph& g, const std::string& node, const StandardAttention& a,
                               const std::string& x);

struct MlaAttention {
  std::string prefix;
  int64_t hidden = 0;
  int64_t heads = 0;
  int64_t q_lora_rank = 0;  // 0: q_proj straight from x (DeepSeek-V2-Lite)
  int64_t kv_lora_rank = 0;
  int64_t nope_dim = 0;
  int64_t rope_dim = 0;
  int64_t v_dim = 0;
  bool bias = false;            // attention_bias: q_a_proj, kv_a_proj_with_mqa and o_proj
  float lora_norm_eps = 1e-6f;  // q_a_layernorm / kv_a_layernorm (transformers' class default)
  const RopeConfig* rope = nullptr;
  proto::RopePairing pairing = proto::INTERLEAVED;
  float scale = 1.0f;
};

// DeepSeek multi-head latent attention, expanded per head (k = [k_nope, shared k_rope]).
std::string mla_attention(ImportGraph& g, const std::string& node, const MlaAttention& a,
                          const std::string& x);

// down(silu(gate x) * up x) with the checkpoint's gate [width, hidden], up, down [hidden, width].
std::string dense_mlp(ImportGraph& g, const std::string& node, const std::string& prefix,
                      int64_t hidden, int64_t width, const std::string& x,
                      const std::string& gate_name = "gate_proj",
                      const std::string& up_name = "up_proj",
                      const std::string& down_name = "down_proj");

// Inputs of op "moe" (graph tensor names; "" = absent), see proto MoEParams.
struct MoeInputs {
  std::string router_weight;
  std::string router_bias;
  std::string score_correction_bias;
  std::string w13;
  std::string w13_bias;
  std::string w2;
  std::string w2_bias;
  std::string shared_gate;
  std::string shared_up;
  std::string shared_down;
  std::string shared_expert_gate;
};

std::string moe(ImportGraph& g, const std::string& node, const std::string& x,
                const proto::MoEParams& params, const MoeInputs& inputs);

// w13 [E, 2I, H] from per-expert gate and up weights ([I, H] each), gate rows first per expert;
// `key(e, "gate")` / `key(e, "up")` name them. w2 [E, H, I] from per-expert down weights.
std::string stack_w13(ImportGraph& g, const std::string& name, int64_t experts, int64_t inter,
                      int64_t hidden, const std::function<std::string(int64_t, bool gate)>& key);
std::string stack_w2(ImportGraph& g, const std::string& name, int64_t experts, int64_t inter,
                     int64_t hidden, const std::function<std::string(int64_t)>& key);

struct DecoderSkeleton {
  std::string prefix = "model.";  // of embed_tokens, layers.{i}, norm
  std::string lm_head = "lm_head.weight";
  std::optional<float> embedding_scale;  // Granite embedding_multiplier
  std::optional<float> residual_scale;   // Granite residual_multiplier
  std::optional<float> logits_scale;     // Granite 1 / logits_scaling
  // Build one layer's attention / FFN from the normalised input; return the output name.
  std::function<std::string(int layer, const std::string& x)> attention;
  std::function<std::string(int layer, const std::string& x)> ffn;
  // Called after each layer is built (progress).
  std::function<void(int layer, int layers)> on_layer;
};

// Inputs token_ids / positions, output logits, embedding, the layers, final norm, lm_head
// (the embedding table when tie_embeddings).
void build_decoder(ImportGraph& g, const CommonConfig& c, const DecoderSkeleton& s);

}  // namespace mg
