// The config.json facts every supported family shares (sizes, norms, RoPE, which layers use
// which attention mask), read with transformers' defaults and rules.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "framework/import/config_reader.h"
#include "proto/model.pb.h"

namespace mg {

// RoPE as config.json states it (v5 `rope_parameters`, or legacy `rope_theta` + `rope_scaling`).
struct RopeConfig {
  std::string type = "default";  // default, linear, yarn or llama3
  double theta = 10000.0;
  proto::RopeScaling scaling;  // type and parameters for the rope op
  // yarn: DeepSeek multiplies its softmax scale by mscale(factor, mscale_all_dim)^2.
  double factor = 1.0;
  double mscale_all_dim = 0.0;
};

// Reads the RoPE settings; `default_theta` is the family's when config.json names none.
// Unsupported rope types are an error naming the type.
RopeConfig read_rope(const ConfigReader& c, int64_t max_position_embeddings, double default_theta);

// transformers' yarn_get_mscale: 1 for factor <= 1, else 0.1 * mscale * ln(factor) + 1.
double yarn_mscale(double factor, double mscale);

// Config values that become float params of graph nodes: checked here so that the error names
// the config key rather than a node of the graph import-hf would write. Both return `value`
// narrowed to float; it must be finite as a float (and, for the first, > 0).
float positive_float_param(const ConfigReader& c, std::string_view key, double value);
float finite_float_param(const ConfigReader& c, std::string_view key, double value);

// Per-layer attention mask kind.
struct LayerAttention {
  int64_t sliding_window = 0;  // 0: off
  int64_t chunk_size = 0;      // 0: off
};

struct CommonConfig {
  int64_t vocab = 0;
  int64_t hidden = 0;
  int64_t layers = 0;
  int64_t heads = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;
  float rms_eps = 1e-6f;
  bool tie_embeddings = false;
  int64_t max_position_embeddings = 0;
  int64_t eos_token_id = -1;
  RopeConfig rope;
};

struct CommonDefaults {
  double rms_eps = 1e-6;
  double rope_theta = 10000.0;
  // head_dim when config.json has none; 0: hidden_size / num_attention_heads.
  int64_t head_dim = 0;
  int64_t max_position_embeddings = 4096;
};

// Sizes, norm eps, embeddings tying, eos and RoPE. Required: vocab_size, hidden_size,
// num_hidden_layers, num_attention_heads. Checks hidden_act is silu.
CommonConfig read_common(const ConfigReader& c, const CommonDefaults& defaults);

// The mask of every layer from `layer_types` ("full_attention", "sliding_attention" with
// `sliding_window`, "chunked_attention" with `attention_chunk_size`).
std::vector<LayerAttention> layer_attention_from_types(const ConfigReader& c,
                                                       const std::vector<std::string>& types,
                                                       int64_t layers);

}  // namespace mg
