// Decoder-only transformer models with deterministic random weights, built per family.
//
//   token_ids ─ embedding ─┬─ rms_norm ─ q/k/v linear ─ [q/k norm] ─ rope ─ attention ─ o ─ add ─┐
//                          └──────────────────────────────────────────────────────────────────────┤
//   ┌─────────────────────────────────────────────────────────────────────────────────────────────┘
//   ├─ rms_norm ─ FFN (dense gated MLP, or the family's MoE block) ─ add ─ ... ─ rms_norm ─ lm_head
//
// A family fixes the FFN and the attention variants; the sizes come from DecoderSpec.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "models/builders/graph_builder.h"

namespace mg {

struct DecoderSpec {
  std::string family = "llama";
  int64_t vocab = 256;
  int64_t hidden = 64;
  int64_t layers = 2;
  int64_t heads = 4;
  int64_t kv_heads = 2;
  int64_t head_dim = 16;
  int64_t intermediate = 128;  // dense MLP width
  int64_t max_seq_len = 256;
  double rope_theta = 10000.0;
  float rms_eps = 1e-5f;
  bool tie_embeddings = false;
  int64_t eos_token_id = -1;
  // Attention variants (set by the family).
  bool qkv_bias = false;
  bool qk_norm = false;        // per-head RMSNorm on q and k before RoPE (Qwen3)
  bool sinks = false;          // learned per-head sink logits (GPT-OSS)
  int64_t sliding_window = 0;  // applied to even layers when > 0 (GPT-OSS pattern)
  // MoE sizes (used by MoE families).
  int64_t experts = 8;
  int64_t top_k = 2;
  int64_t moe_intermediate = 64;
  int64_t shared_intermediate = 0;
  int64_t first_dense_layers = 0;  // leading layers that use the dense MLP
  uint64_t seed = 0;
  DType weight_dtype = DType::kBF16;
  // Expert weights (w13, w2) quantized to FP8 by GraphBuilder::quantize_fp8 with this scheme;
  // MOE_QUANT_UNQUANTIZED keeps them in weight_dtype. FP8 schemes quantize activations
  // dynamically (W8A8) per 128 channels (block) or per token.
  proto::MoEQuantScheme moe_quant = proto::MOE_QUANT_UNQUANTIZED;
  // INT4_WEIGHT_ONLY / INT8_WEIGHT_ONLY: the codes (kInt4, kUInt4 with zero points, kInt8, kUInt8)
  // and the group along the input (-1 channel-wise), by GraphBuilder::quantize_int.
  QuantElement moe_quant_element = QuantElement::kFromDtype;
  int64_t moe_quant_group = -1;
};

// Builds one layer's FFN from `x` ([T, hidden], already normalised); returns its output's name.
using FfnBuilder = std::function<std::string(GraphBuilder& b, const DecoderSpec& spec, int layer,
                                             const std::string& x)>;

struct Family {
  std::string name;
  std::string description;
  // Adjusts the spec's family-specific fields (attention variants, MoE shape defaults).
  std::function<void(DecoderSpec& spec)> configure;
  FfnBuilder ffn;
};

// Every family `make-model` knows, in the order `--help` lists them.
const std::vector<Family>& families();
const Family& find_family(const std::string& name);  // throws mg::Error listing the known ones

// The dense gated MLP (SiLU) FFN, shared by families and by dense layers of MoE families.
std::string dense_ffn(GraphBuilder& b, const DecoderSpec& spec, int layer, const std::string& x);

// Builds the whole decoder for `spec` (the family's configure() must already have run);
// `graph_only`: weights declared, not generated (GraphBuilder::set_graph_only).
GraphBuilder build_decoder(const DecoderSpec& spec, bool graph_only = false);

// Hook for MoE families (models/builders/moe_families.cc).
void add_moe_families(std::vector<Family>& families);

}  // namespace mg
