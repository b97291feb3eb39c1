#include "framework/import/hf_common.h"

#include <cmath>

#include "framework/core/error.h"

namespace mg {

double yarn_mscale(double factor, double mscale) {
  return factor <= 1.0 ? 1.0 : 0.1 * mscale * std::log(factor) + 1.0;
}

float finite_float_param(const ConfigReader& c, std::string_view key, double value) {
  const float f = static_cast<float>(value);
  if (!std::isfinite(value) || !std::isfinite(f)) {
    c.fail(key, fmt::format("expected a finite number, found {}", value));
  }
  return f;
}

float positive_float_param(const ConfigReader& c, std::string_view key, double value) {
  const float f = static_cast<float>(value);
  if (!std::isfinite(value) || !std::isfinite(f) || !(f > 0.0f)) {
    c.fail(key, fmt::format("expected a positive finite number, found {}", value));
  }
  return f;
}

namespace {

// Fills `rope` from the object holding the RoPE parameters (`r`; the top-level config for
// legacy files) with rope type `type`.
void read_scaling(const ConfigReader& r, const std::string& type, int64_t max_position,
                  RopeConfig& rope) {
  proto::RopeScaling& s = rope.scaling;
  if (type == "default") {
    s.set_type(proto::RopeScaling::NONE);
    return;
  }
  if (type == "linear") {
    s.set_type(proto::RopeScaling::LINEAR);
    rope.factor = r.number("factor");
    positive_float_param(r, "factor", rope.factor);
    s.set_factor(rope.factor);
    return;
  }
  // yarn and llama3 fall back to max_position_embeddings for the original context.
  const int64_t original = r.integer_or("original_max_position_embeddings", max_position);
  if (original <= 0) {
    r.fail("original_max_position_embeddings",
           fmt::format("expected a positive integer, found {}", original));
  }
  s.set_original_max_position(original);
  if (type == "yarn") {
    s.set_type(proto::RopeScaling::YARN);
    rope.factor = r.number_or("factor", static_cast<double>(max_position) / original);
    positive_float_param(r, "factor", rope.factor);
    s.set_factor(rope.factor);
    // transformers: `get("beta_fast") or 32`, so 0 means the default too.
    if (const auto v = r.number_opt("beta_fast"); v && *v != 0.0) {
      s.set_beta_fast(positive_float_param(r, "beta_fast", *v));
    }
    if (const auto v = r.number_opt("beta_slow"); v && *v != 0.0) {
      s.set_beta_slow(positive_float_param(r, "beta_slow", *v));
    }
    if (r.has("truncate")) s.set_truncate(r.boolean_or("truncate", true));
    if (const auto v = r.number_opt("attention_factor")) {
      s.set_attention_factor(positive_float_param(r, "attention_factor", *v));
    }
    s.set_mscale(r.number_or("mscale", 0.0));
    finite_float_param(r, "mscale", s.mscale());
    rope.mscale_all_dim = r.number_or("mscale_all_dim", 0.0);
    finite_float_param(r, "mscale_all_dim", rope.mscale_all_dim);
    s.set_mscale_all_dim(rope.mscale_all_dim);
    return;
  }
  if (type == "llama3") {
    s.set_type(proto::RopeScaling::LLAMA3);
    rope.factor = r.number("factor");
    positive_float_param(r, "factor", rope.factor);
    s.set_factor(rope.factor);
    s.set_low_freq_factor(r.number("low_freq_factor"));
    positive_float_param(r, "low_freq_factor", s.low_freq_factor());
    s.set_high_freq_factor(r.number("high_freq_factor"));
    positive_float_param(r, "high_freq_factor", s.high_freq_factor());
    if (s.high_freq_factor() < s.low_freq_factor()) {
      r.fail("high_freq_factor", fmt::format("{} is below low_freq_factor {}", s.high_freq_factor(),
                                             s.low_freq_factor()));
    }
    return;
  }
  r.fail("rope_type", fmt::format("RoPE type '{}' is not supported (expected default, linear, "
                                  "yarn or llama3)",
                                  type));
}

}  // namespace

RopeConfig read_rope(const ConfigReader& c, int64_t max_position, double default_theta) {
  RopeConfig rope;
  if (const auto params = c.object_opt("rope_parameters")) {
    rope.theta = params->number_or("rope_theta", c.number_or("rope_theta", default_theta));
    rope.type = params->string_or("rope_type", params->string_or("type", "default"));
    read_scaling(*params, rope.type, max_position, rope);
  } else {
    rope.theta = c.number_or("rope_theta", default_theta);
    if (const auto scaling = c.object_opt("rope_scaling")) {
      rope.type = scaling->string_or("rope_type", scaling->string_or("type", "default"));
      read_scaling(*scaling, rope.type, max_position, rope);
    } else {
      rope.scaling.set_type(proto::RopeScaling::NONE);
    }
  }
  if (!(rope.theta > 0.0) || !std::isfinite(rope.theta)) {
    c.fail("rope_theta", fmt::format("expected a positive number, found {}", rope.theta));
  }
  return rope;
}

CommonConfig read_common(const ConfigReader& c, const CommonDefaults& defaults) {
  CommonConfig cc;
  cc.vocab = c.positive("vocab_size");
  cc.hidden = c.positive("hidden_size");
  cc.layers = c.positive("num_hidden_layers");
  cc.heads = c.positive("num_attention_heads");
  cc.kv_heads = c.integer_or("num_key_value_heads", cc.heads);
  if (cc.kv_heads <= 0 || cc.heads % cc.kv_heads != 0) {
    c.fail("num_key_value_heads",
           fmt::format("{} must be positive and divide num_attention_heads = {}", cc.kv_heads,
                       cc.heads));
  }
  const int64_t fallback_head_dim =
      defaults.head_dim > 0 ? defaults.head_dim : cc.hidden / cc.heads;
  cc.head_dim = c.integer_or("head_dim", fallback_head_dim);
  if (cc.head_dim <= 0) {
    c.fail("head_dim", fmt::format("expected a positive integer, found {}", cc.head_dim));
  }
  cc.rms_eps =
      positive_float_param(c, "rms_norm_eps", c.number_or("rms_norm_eps", defaults.rms_eps));
  cc.tie_embeddings = c.boolean_or("tie_word_embeddings", false);
  cc.max_position_embeddings =
      c.integer_or("max_position_embeddings", defaults.max_position_embeddings);
  if (cc.max_position_embeddings <= 0) {
    c.fail("max_position_embeddings", "expected a positive integer");
  }
  cc.eos_token_id = c.first_integer_opt("eos_token_id").value_or(-1);
  const std::string act = c.string_or("hidden_act", "silu");
  if (act != "silu") {
    c.fail("hidden_act", fmt::format("activation '{}' is not supported (expected silu)", act));
  }
  cc.rope = read_rope(c, cc.max_position_embeddings, defaults.rope_theta);
  return cc;
}

std::vector<LayerAttention> layer_attention_from_types(const ConfigReader& c,
                                                       const std::vector<std::string>& types,
                                                       int64_t layers) {
  if (static_cast<int64_t>(types.size()) != layers) {
    c.fail("layer_types",
           fmt::format("lists {} layers, but num_hidden_layers is {}", types.size(), layers));
  }
  std::vector<LayerAttention> out(types.size());
  for (size_t i = 0; i < types.size(); ++i) {
    if (types[i] == "full_attention") continue;
    if (types[i] == "sliding_attention") {
      out[i].sliding_window = c.integer("sliding_window");
      if (out[i].sliding_window <= 0) {
        c.fail("sliding_window", fmt::format("expected a positive window for the sliding layers, "
                                             "found {}",
                                             out[i].sliding_window));
      }
    } else if (types[i] == "chunked_attention") {
      out[i].chunk_size = c.integer_or("attention_chunk_size", 0);
      if (out[i].chunk_size < 0) c.fail("attention_chunk_size", "expected a positive integer");
    } else {
      c.fail("layer_types", fmt::format("layer {}: attention type '{}' is not supported (expected "
                                        "full_attention, sliding_attention or chunked_attention)",
                                        i, types[i]));
    }
  }
  return out;
}

}  // namespace mg
