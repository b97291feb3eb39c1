// The table of op test cases (see op_cases.h). Each op's section lists its shapes and params:
// the union of what the CPU and CUDA op tests swept before the table, plus the sizes users bring
// (odd and prime widths, one token and many, small and model-sized heads).
#include "tests/testing/op_cases.h"

#include <cmath>
#include <limits>
#include <optional>
#include <utility>

#include "framework/core/error.h"

namespace mg::testing {

CaseInput random_input(Shape shape, float lo, float hi) {
  return CaseInput{CaseInput::Fill::kRandom, std::move(shape), lo, hi, {}};
}

CaseInput random_input_with_specials(Shape shape, float lo, float hi) {
  return CaseInput{CaseInput::Fill::kRandomWithSpecials, std::move(shape), lo, hi, {}};
}

CaseInput i32_input(std::vector<int32_t> values) {
  const auto n = static_cast<int64_t>(values.size());
  return CaseInput{CaseInput::Fill::kI32, {n}, 0.0f, 0.0f, std::move(values)};
}

CaseInput absent_input() {
  return CaseInput{};
}

namespace {

proto::Node node_of(const std::string& op) {
  proto::Node node;
  node.set_name(op + "0");
  node.set_op(op);
  return node;
}

std::string bound_str(std::optional<float> bound) {
  return bound ? fmt::format("{}", *bound) : "unset";
}

// 0, 1, ..., n-1 shifted by `first`.
std::vector<int32_t> consecutive(int64_t n, int32_t first = 0) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = first + static_cast<int32_t>(i);
  return v;
}

// ---- embedding: ids [T] I32, table [V, H] -------------------------------------------------

void add_embedding_cases(std::vector<OpCase>& out) {
  struct Dims {
    int64_t vocab, hidden;
    std::vector<int32_t> ids;
    std::optional<float> scale;
  };
  std::vector<Dims> shapes = {
      {1, 1, {0}, std::nullopt},
      {37, 13, {36}, std::nullopt},
      {37, 13, {5, 0, 36, 5, 17}, 2.5f},
      {1000, 129, {999, 3, 3, 512, 0, 1, 77, 400, 401}, 0.125f},
  };
  // A prefill's worth of ids over a prime vocabulary, both ends included.
  std::vector<int32_t> many(300);
  for (size_t i = 0; i < many.size(); ++i) many[i] = static_cast<int32_t>((i * 2654435761u) % 5003);
  many[7] = 5002;
  many[8] = 0;
  shapes.push_back({5003, 67, many, 0.5f});
  for (const Dims& s : shapes) {
    OpCase c;
    c.name = fmt::format("embedding V={} H={} T={} scale={}", s.vocab, s.hidden, s.ids.size(),
                         bound_str(s.scale));
    c.node = node_of("embedding");
    c.node.mutable_embedding();
    if (s.scale) c.node.mutable_embedding()->set_scale(*s.scale);
    c.inputs = {i32_input(s.ids), random_input({s.vocab, s.hidden})};
    c.cpu_tolerance = 1e-7;
    out.push_back(std::move(c));
  }
}

// ---- rms_norm: x [T, D], weight [G] -------------------------------------------------------

void add_rms_norm_cases(std::vector<OpCase>& out) {
  struct Dims {
    int64_t tokens, dim, group;  // group 0: D
    bool weight;
  };
  const std::vector<Dims> shapes = {
      {1, 1, 0, true},      {1, 7, 0, true},       {5, 33, 0, true},   {3, 64, 16, true},
      {3, 64, 16, false},   {1, 4096, 0, true},    {17, 96, 32, true}, {4, 30, 3, false},
      {64, 257, 257, true}, {2, 1024, 128, false}, {3, 2048, 0, true}, {9, 8192, 1024, true},
      {1, 4099, 0, true},   {300, 131, 0, true},   {7, 400, 80, true},  // prime D, head_dim 80
  };
  for (const Dims& s : shapes) {
    OpCase c;
    c.name = fmt::format("rms_norm T={} D={} G={} {}", s.tokens, s.dim, s.group,
                         s.weight ? "weight" : "weightless");
    c.node = node_of("rms_norm");
    c.node.mutable_rms_norm()->set_eps(1e-5f);
    c.node.mutable_rms_norm()->set_group_size(s.group);
    c.node.mutable_rms_norm()->set_has_weight(s.weight);
    c.inputs = {random_input({s.tokens, s.dim}, -3.0f, 2.0f)};
    if (s.weight) c.inputs.push_back(random_input({s.group == 0 ? s.dim : s.group}, 0.5f, 1.5f));
    c.cpu_tolerance = 1e-6;
    out.push_back(std::move(c));
  }
}

// ---- linear: x [T, in], weight [out, in], bias [out] --------------------------------------

void add_linear_cases(std::vector<OpCase>& out) {
  struct Dims {
    int64_t tokens, in, out;
    bool bias;
    std::optional<float> scale;
    int cpu_threads;
  };
  const std::vector<Dims> shapes = {
      {1, 1, 1, false, std::nullopt, 1},
      {1, 7, 5, true, std::nullopt, 2},
      {1, 64, 257, false, std::nullopt, 4},
      {1, 512, 1000, true, 0.25f, 3},
      {3, 17, 33, true, 2.0f, 2},
      {17, 130, 48, false, std::nullopt, 4},
      {64, 96, 200, true, 0.5f, 4},
      {129, 33, 15, false, 1.5f, 1},
      {1, 4096, 1024, true, std::nullopt, 2},    // a decode step of a model-sized projection
      {300, 1024, 768, false, std::nullopt, 2},  // a prefill of one
      {7, 1021, 131, true, std::nullopt, 3},     // primes
      {257, 67, 509, false, 0.5f, 2},
      // rows that are not 16-byte multiples in any dtype (cublasGemmEx on CUDA): the odd HF
      // fixtures' projections and a router (out = experts)
      {5, 27, 19, true, std::nullopt, 2},
      {12, 36, 30, false, std::nullopt, 2},
      {40, 36, 5, false, std::nullopt, 1},
      {3, 10, 22, true, std::nullopt, 1},
  };
  for (const Dims& s : shapes) {
    OpCase c;
    c.name = fmt::format("linear T={} in={} out={} bias={} scale={}", s.tokens, s.in, s.out, s.bias,
                         bound_str(s.scale));
    c.node = node_of("linear");
    c.node.mutable_linear()->set_has_bias(s.bias);
    if (s.scale) c.node.mutable_linear()->set_scale(*s.scale);
    c.inputs = {random_input({s.tokens, s.in}), random_input({s.out, s.in})};
    if (s.bias) c.inputs.push_back(random_input({s.out}));
    c.cpu_threads = s.cpu_threads;
    out.push_back(std::move(c));
  }
}

// ---- rope: x [T, heads * head_dim], positions [T] -----------------------------------------

proto::RopeParams rope_params(int64_t heads, int64_t head_dim, proto::RopePairing pairing,
                              double theta = 10000.0) {
  proto::RopeParams p;
  p.set_num_heads(heads);
  p.set_head_dim(head_dim);
  p.set_pairing(pairing);
  p.set_theta(theta);
  return p;
}

proto::RopeParams gpt_oss_yarn() {
  proto::RopeParams p = rope_params(2, 64, proto::HALF_SPLIT, 150000.0);
  auto* s = p.mutable_scaling();
  s->set_type(proto::RopeScaling::YARN);
  s->set_factor(32.0);
  s->set_original_max_position(4096);
  s->set_beta_fast(32.0);
  s->set_beta_slow(1.0);
  s->set_truncate(false);
  return p;
}

// DeepSeek-V3-like: truncate (default), beta defaults, mscale == mscale_all_dim, on the last 64
// of 96 dims.
proto::RopeParams deepseek_yarn() {
  proto::RopeParams p = rope_params(3, 96, proto::INTERLEAVED, 10000.0);
  p.set_rotary_offset(32);
  p.set_rotary_dim(64);
  auto* s = p.mutable_scaling();
  s->set_type(proto::RopeScaling::YARN);
  s->set_factor(40.0);
  s->set_original_max_position(4096);
  s->set_mscale(1.0);
  s->set_mscale_all_dim(1.0);
  return p;
}

// Llama 3.1: theta 500000, d 128, s 8, low 1, high 4, L0 8192.
proto::RopeParams llama31() {
  proto::RopeParams p = rope_params(2, 128, proto::INTERLEAVED, 500000.0);
  auto* s = p.mutable_scaling();
  s->set_type(proto::RopeScaling::LLAMA3);
  s->set_factor(8.0);
  s->set_original_max_position(8192);
  s->set_low_freq_factor(1.0);
  s->set_high_freq_factor(4.0);
  return p;
}

std::vector<RopeConfig> make_rope_configs() {
  std::vector<RopeConfig> out;
  out.push_back({"smallest", rope_params(1, 2, proto::HALF_SPLIT)});
  out.push_back({"half_split", rope_params(3, 8, proto::HALF_SPLIT)});
  out.push_back({"interleaved", rope_params(5, 8, proto::INTERLEAVED, 500000.0)});
  out.push_back({"head6", rope_params(4, 6, proto::HALF_SPLIT)});  // small heads, 12-byte rows
  out.push_back({"head10_interleaved", rope_params(3, 10, proto::INTERLEAVED)});
  proto::RopeParams partial = rope_params(4, 24, proto::HALF_SPLIT);
  partial.set_rotary_dim(6);  // rotates dims 0..5, keeps 6..23
  out.push_back({"partial", partial});
  proto::RopeParams tail = rope_params(2, 24, proto::HALF_SPLIT);
  tail.set_rotary_offset(8);  // DeepSeek MLA: rotates the last 16 dims
  tail.set_rotary_dim(16);
  out.push_back({"offset", tail});
  proto::RopeParams phi = rope_params(7, 80, proto::HALF_SPLIT);
  phi.set_rotary_dim(32);  // Phi-style partial rotary of an 80-dim head, 7 heads
  out.push_back({"partial_head80", phi});
  proto::RopeParams linear = rope_params(2, 16, proto::HALF_SPLIT);
  linear.mutable_scaling()->set_type(proto::RopeScaling::LINEAR);
  linear.mutable_scaling()->set_factor(4.0);
  out.push_back({"linear", linear});
  out.push_back({"yarn_gpt_oss", gpt_oss_yarn()});
  out.push_back({"yarn_deepseek_v3", deepseek_yarn()});
  proto::RopeParams ds_v2 = deepseek_yarn();
  ds_v2.mutable_scaling()->set_mscale(0.707);
  out.push_back({"yarn_deepseek_v2", ds_v2});
  proto::RopeParams explicit_factor = gpt_oss_yarn();
  explicit_factor.mutable_scaling()->set_attention_factor(0.75);
  out.push_back({"yarn_attention_factor", explicit_factor});
  out.push_back({"llama3", llama31()});
  proto::RopeParams scout = llama31();  // Llama-4 Scout: equal factors, no smoothing band
  scout.mutable_scaling()->set_factor(16.0);
  scout.mutable_scaling()->set_high_freq_factor(1.0);
  out.push_back({"llama4_scout", scout});
  out.push_back({"model_width", rope_params(32, 128, proto::HALF_SPLIT, 500000.0)});
  return out;
}

void add_rope_cases(std::vector<OpCase>& out) {
  for (const RopeConfig& config : rope_configs()) {
    // A 300-token prefill for two configs only: the CUDA kernel runs one block per token, so
    // more tokens add launches, not new paths.
    std::vector<int64_t> token_counts = {1, 7, 40};
    if (config.name == "partial_head80" || config.name == "model_width") {
      token_counts.push_back(300);
    }
    for (int64_t tokens : token_counts) {
      OpCase c;
      c.name = fmt::format("rope {} T={}", config.name, tokens);
      c.node = node_of("rope");
      *c.node.mutable_rope() = config.params;
      // Decode-like, prefill-like and far positions (angles up to ~1e5 rad).
      std::vector<int32_t> positions(static_cast<size_t>(tokens));
      const int64_t first = static_cast<int64_t>(out.size()) * 613;
      for (int64_t t = 0; t < tokens; ++t) {
        positions[t] = static_cast<int32_t>((t * 7919 + first) % 131072);
      }
      const int64_t width = config.params.num_heads() * config.params.head_dim();
      c.inputs = {random_input({tokens, width}), i32_input(std::move(positions))};
      out.push_back(std::move(c));
    }
  }
}

// ---- add: a [T, D], b [T, D] --------------------------------------------------------------

void add_add_cases(std::vector<OpCase>& out) {
  struct Dims {
    int64_t rows, cols;
    std::optional<float> scale;
  };
  const std::vector<Dims> shapes = {
      {7, 33, 0.5f}, {1, 1, 1.0f}, {300, 4096, -2.0f}, {1, 4099, std::nullopt}, {257, 131, 0.25f}};
  for (const Dims& s : shapes) {
    OpCase c;
    c.name = fmt::format("add {}x{} scale={}", s.rows, s.cols, bound_str(s.scale));
    c.node = node_of("add");
    c.node.mutable_add();
    if (s.scale) c.node.mutable_add()->set_scale(*s.scale);
    c.inputs = {random_input({s.rows, s.cols}), random_input({s.rows, s.cols})};
    c.cpu_tolerance = 1e-7;
    out.push_back(std::move(c));
  }
}

// ---- gated_mlp: x [T, H], gate [I, H], up [I, H], down [H, I] -----------------------------

void add_gated_mlp_cases(std::vector<OpCase>& out) {
  struct Dims {
    int64_t tokens, hidden, inter;
  };
  // The two model-sized shapes keep fp16 well inside its range (|out| ~ 1e3).
  const std::vector<Dims> shapes = {{1, 1, 1},    {1, 16, 48},    {5, 33, 17},     {17, 64, 200},
                                    {70, 40, 96}, {1, 512, 1408}, {130, 256, 704}, {3, 97, 211}};
  for (proto::Activation act : {proto::SILU_GATED, proto::GELU_GATED, proto::GELU_TANH_GATED}) {
    for (const Dims& s : shapes) {
      OpCase c;
      c.name = fmt::format("gated_mlp {} T={} H={} I={}", proto::Activation_Name(act), s.tokens,
                           s.hidden, s.inter);
      c.node = node_of("gated_mlp");
      c.node.mutable_gated_mlp()->set_activation(act);
      c.inputs = {random_input({s.tokens, s.hidden}, -2.0f, 2.0f),
                  random_input({s.inter, s.hidden}), random_input({s.inter, s.hidden}),
                  random_input({s.hidden, s.inter})};
      // bf16/fp16 also round the intermediate h = act(g) * u before the down projection.
      c.device_tolerance_factor = 2.0;
      out.push_back(std::move(c));
    }
  }
}

// ---- attention: q [T, H * D], k [T, KV * D], v [T, KV * Dv], positions [T], sinks [H] -----

proto::AttentionParams attention_params(int64_t heads, int64_t kv_heads, int64_t head_dim,
                                        int64_t v_head_dim = 0) {
  proto::AttentionParams p;
  p.set_num_heads(heads);
  p.set_num_kv_heads(kv_heads);
  p.set_head_dim(head_dim);
  p.set_v_head_dim(v_head_dim);
  return p;
}

std::vector<AttentionConfig> make_attention_configs() {
  std::vector<AttentionConfig> out;
  auto add = [&](std::string name, proto::AttentionParams p, std::string cpu_only = "") {
    out.push_back({std::move(name), std::move(p), std::move(cpu_only)});
  };
  add("smallest", attention_params(1, 1, 1));
  add("mha", attention_params(4, 4, 16));
  add("gqa2", attention_params(4, 2, 16));
  proto::AttentionParams scaled = attention_params(8, 2, 12);
  scaled.set_scale(0.3f);
  add("gqa4_scale", scaled);
  proto::AttentionParams window = attention_params(6, 3, 64);
  window.set_sliding_window(5);
  add("window5", window);
  proto::AttentionParams chunked = attention_params(4, 1, 16);
  chunked.set_chunk_size(7);
  add("llama4_chunks7", chunked);
  proto::AttentionParams sinks = attention_params(4, 2, 32);
  sinks.set_has_sinks(true);
  add("gpt_oss_sinks", sinks);
  proto::AttentionParams sinks_window = sinks;
  sinks_window.set_sliding_window(70);  // across key blocks
  add("sinks_window70", sinks_window);
  add("mla_dv16", attention_params(2, 1, 24, 16));
  proto::AttentionParams everything = attention_params(3, 3, 5, 9);
  everything.set_sliding_window(4);
  everything.set_chunk_size(6);
  everything.set_has_sinks(true);
  add("everything_odd", everything);
  add("llama_head128", attention_params(8, 2, 128));
  add("deepseek_qk192_v128", attention_params(4, 1, 192, 128));
  proto::AttentionParams widest = attention_params(2, 2, 256);
  widest.set_has_sinks(true);
  add("head256_sinks", widest);
  add("phi_head80_gqa5", attention_params(5, 1, 80));
  add("head6_gqa2", attention_params(4, 2, 6));    // the qwen3_moe_odd fixture's heads
  add("head10_gqa3", attention_params(3, 1, 10));  // mixtral_odd's
  add("head3_gqa3", attention_params(6, 2, 3));
  // DeepSeek's absorbed MLA attends over the 512 + 64 latent: the CPU runs it, the GPU refuses.
  add("mla_absorbed_576", attention_params(2, 1, 576, 512),
      "the CUDA kernel takes head_dim and v_head_dim up to 512 "
      "(CudaAttention.HeadDimBeyondTheKernelIsAClearError)");
  return out;
}

void add_attention_cases(std::vector<OpCase>& out) {
  for (const AttentionConfig& config : attention_configs()) {
    const proto::AttentionParams& p = config.params;
    for (int64_t tokens : {1, 3, 19, 150}) {
      OpCase c;
      c.name = fmt::format("attention {} T={}", config.name, tokens);
      c.node = node_of("attention");
      *c.node.mutable_attention() = p;
      c.inputs = {random_input({tokens, p.num_heads() * p.head_dim()}, -3.0f, 3.0f),
                  random_input({tokens, p.num_kv_heads() * p.head_dim()}, -2.0f, 2.0f),
                  random_input({tokens, p.num_kv_heads() * attention_v_head_dim(p)}),
                  i32_input(consecutive(tokens)),
                  p.has_sinks() ? random_input({p.num_heads()}, -2.0f, 4.0f) : absent_input()};
      c.cpu_only = config.cpu_only;
      out.push_back(std::move(c));
    }
  }
}

// ---- clamp: x [T, D] (OLMoE's clip_qkv) ---------------------------------------------------

void add_clamp_cases(std::vector<OpCase>& out) {
  // 0.3, 1.1 and 0.7 are not exact in BF16 or F16: the bound itself is rounded on store.
  const std::vector<std::pair<std::optional<float>, std::optional<float>>> bounds = {
      {-0.5f, 0.5f}, {std::nullopt, 0.3f}, {-1.1f, std::nullopt}, {std::nullopt, std::nullopt},
      {0.7f, 0.7f},  {-8.0f, 8.0f},        {std::nullopt, 0.25f}, {-1.0f, std::nullopt}};
  const std::vector<std::pair<int64_t, int64_t>> shapes = {{1, 1},  {1, 7},    {5, 33},
                                                           {9, 33}, {64, 257}, {300, 4096}};
  for (auto [rows, cols] : shapes) {
    for (auto [lo, hi] : bounds) {
      OpCase c;
      c.name = fmt::format("clamp {}x{} min={} max={}", rows, cols, bound_str(lo), bound_str(hi));
      c.node = node_of("clamp");
      c.node.mutable_clamp();
      if (lo) c.node.mutable_clamp()->set_min(*lo);
      if (hi) c.node.mutable_clamp()->set_max(*hi);
      c.inputs = {random_input_with_specials({rows, cols}, -2.0f, 2.0f)};
      c.match = Match::kExact;
      c.cpu_threads = 2;
      out.push_back(std::move(c));
    }
  }
}

// ---- concat_heads: a [T, n * da], b [T, m * db] (DeepSeek MLA's k = [k_nope, k_rope]) -----

void add_concat_heads_cases(std::vector<OpCase>& out) {
  struct Dims {
    int64_t heads, a_dim, b_heads, b_dim;
  };
  const std::vector<Dims> shapes = {
      {1, 1, 1, 1},      {4, 8, 1, 4},  // the DeepSeek fixtures' k, one rope key shared
      {4, 8, 4, 4},                     // m = n
      {3, 5, 1, 3},                     // odd widths: element copies in BF16/F16
      {2, 7, 2, 9},                     // odd widths, m = n
      {2, 6, 2, 2},                     // 4- and 8-byte units
      {4, 16, 1, 8},                    // 16-byte units, m = 1
      {4, 16, 4, 8},                    // m = n
      {16, 128, 1, 64},                 // DeepSeek-V3's widths
      {128, 128, 1, 64},
  };
  for (const Dims& s : shapes) {
    for (int64_t tokens : {1, 7, 64}) {
      OpCase c;
      c.name = fmt::format("concat_heads T={} n={} da={} m={} db={}", tokens, s.heads, s.a_dim,
                           s.b_heads, s.b_dim);
      c.node = node_of("concat_heads");
      c.node.mutable_concat_heads()->set_num_heads(s.heads);
      c.node.mutable_concat_heads()->set_a_head_dim(s.a_dim);
      c.node.mutable_concat_heads()->set_b_head_dim(s.b_dim);
      c.inputs = {random_input({tokens, s.heads * s.a_dim}),
                  random_input({tokens, s.b_heads * s.b_dim})};
      c.match = Match::kExact;
      c.cpu_threads = 2;
      out.push_back(std::move(c));
    }
  }
}

// ---- attn_temperature: x [T, D], positions [T] (Llama-4's NoPE layers) --------------------

void add_attn_temperature_cases(std::vector<OpCase>& out) {
  struct Dims {
    int64_t tokens, dim;
    float attn_scale, floor_scale;
    int32_t first_position;  // -1: temperature_position's mix
  };
  const std::vector<Dims> shapes = {
      {1, 1, 0.1f, 4.0f, -1},              // the Llama-4 fixture's params
      {1, 8, 0.1f, 8192.0f, -1},           // Llama 4's params, one decode token
      {7, 33, 0.25f, 8.0f, -1},            // an odd width
      {20, 24, 0.25f, 8.0f, 100},          // consecutive positions from 100
      {40, 128, -0.5f, 3.5f, -1},          // a factor below 1, a fractional floor_scale
      {129, 257, 1.0f, 1.0f, -1},          // floor_scale 1: a new step at every position
      {300, 40 * 128, 0.1f, 8192.0f, -1},  // Llama-4 Scout's queries of a prefill
  };
  for (const Dims& s : shapes) {
    OpCase c;
    c.name = fmt::format("attn_temperature T={} D={} attn_scale={} floor_scale={}", s.tokens, s.dim,
                         s.attn_scale, s.floor_scale);
    c.node = node_of("attn_temperature");
    c.node.mutable_attn_temperature()->set_attn_scale(s.attn_scale);
    c.node.mutable_attn_temperature()->set_floor_scale(s.floor_scale);
    std::vector<int32_t> positions = consecutive(s.tokens, s.first_position);
    if (s.first_position < 0) {
      for (int64_t t = 0; t < s.tokens; ++t) {
        positions[t] = temperature_position(t, s.floor_scale, static_cast<uint32_t>(out.size()));
      }
    }
    c.inputs = {random_input({s.tokens, s.dim}), i32_input(std::move(positions))};
    c.match = Match::kCloseAndGpuEqualsCpuKernel;
    c.cpu_tolerance = 1e-7;
    c.cpu_threads = 2;
    out.push_back(std::move(c));
  }
}

std::vector<OpCase> make_op_cases() {
  std::vector<OpCase> out;
  add_embedding_cases(out);
  add_rms_norm_cases(out);
  add_linear_cases(out);
  add_rope_cases(out);
  add_add_cases(out);
  add_gated_mlp_cases(out);
  add_attention_cases(out);
  add_clamp_cases(out);
  add_concat_heads_cases(out);
  add_attn_temperature_cases(out);
  return out;
}

}  // namespace

const std::vector<OpCase>& op_cases() {
  static const std::vector<OpCase> cases = make_op_cases();
  return cases;
}

std::vector<const OpCase*> op_cases_of(std::string_view op) {
  std::vector<const OpCase*> out;
  for (const OpCase& c : op_cases()) {
    if (c.node.op() == op) out.push_back(&c);
  }
  MG_CHECK(!out.empty(), "the op case table has no case of op '{}'", op);
  return out;
}

const std::vector<AttentionConfig>& attention_configs() {
  static const std::vector<AttentionConfig> configs = make_attention_configs();
  return configs;
}

int64_t attention_v_head_dim(const proto::AttentionParams& params) {
  return params.v_head_dim() == 0 ? params.head_dim() : params.v_head_dim();
}

const std::vector<RopeConfig>& rope_configs() {
  static const std::vector<RopeConfig> configs = make_rope_configs();
  return configs;
}

int32_t temperature_position(int64_t t, float floor_scale, uint32_t seed) {
  constexpr int64_t kMax = std::numeric_limits<int32_t>::max();
  switch (t % 4) {
    case 0:
      return static_cast<int32_t>(t);
    case 1:
      return static_cast<int32_t>(std::ceil(floor_scale * static_cast<double>(t + 1))) - 1;
    case 2:
      return static_cast<int32_t>((t * 2654435761LL + seed) % kMax);
    default:
      return static_cast<int32_t>(kMax - t);
  }
}

}  // namespace mg::testing
