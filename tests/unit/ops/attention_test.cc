#include <gtest/gtest.h>

#include <cmath>

#include "ops/nn/attention/attention.h"
#include "tests/testing/op_harness.h"
#include "tests/testing/test_util.h"
#include "tests/unit/ops/nn_test_util.h"

namespace mg {
namespace {

struct AttnCase {
  int64_t heads, kv_heads, head_dim, v_head_dim;  // v_head_dim 0: = head_dim
  int64_t window = 0;
  int64_t chunk = 0;
  bool sinks = false;
  std::optional<float> scale = std::nullopt;
};

std::string case_str(const AttnCase& c) {
  return fmt::format("H={} KV={} D={} Dv={} W={} C={} sinks={} scale={}", c.heads, c.kv_heads,
                     c.head_dim, c.v_head_dim, c.window, c.chunk, c.sinks,
                     c.scale ? std::to_string(*c.scale) : "default");
}

proto::Node attention_node(const AttnCase& c) {
  proto::Node node;
  node.set_name("attn");
  node.set_op("attention");
  auto* p = node.mutable_attention();
  p->set_num_heads(c.heads);
  p->set_num_kv_heads(c.kv_heads);
  p->set_head_dim(c.head_dim);
  p->set_v_head_dim(c.v_head_dim);
  p->set_sliding_window(c.window);
  p->set_chunk_size(c.chunk);
  p->set_has_sinks(c.sinks);
  if (c.scale) p->set_scale(*c.scale);
  return node;
}

int64_t dv_of(const AttnCase& c) {
  return c.v_head_dim == 0 ? c.head_dim : c.v_head_dim;
}

// A whole sequence of q, k, v rows for positions 0..len-1.
struct Sequence {
  Tensor q, k, v, sinks;
};

Sequence make_sequence(const AttnCase& c, int64_t len, uint32_t seed) {
  Sequence s;
  s.q = testing::random_tensor({len, c.heads * c.head_dim}, seed, -3.0f, 3.0f);
  s.k = testing::random_tensor({len, c.kv_heads * c.head_dim}, seed + 1, -2.0f, 2.0f);
  s.v = testing::random_tensor({len, c.kv_heads * dv_of(c)}, seed + 2);
  if (c.sinks) s.sinks = testing::random_tensor({c.heads}, seed + 3, -2.0f, 4.0f);
  return s;
}

// Inputs for the rows [begin, end) of the sequence.
std::vector<Tensor> call_inputs(const Sequence& s, int64_t begin, int64_t end) {
  return {s.q.slice_rows(begin, end), s.k.slice_rows(begin, end), s.v.slice_rows(begin, end),
          testing::positions_tensor(end - begin, static_cast<int32_t>(begin)), s.sinks};
}

// Reference output of rows [begin, end) given the keys of every position < end.
std::vector<float> reference(const AttnCase& c, const Sequence& s, int64_t begin, int64_t end) {
  const proto::Node node = attention_node(c);
  const Tensor positions = testing::positions_tensor(end - begin, static_cast<int32_t>(begin));
  std::vector<float> out(static_cast<size_t>((end - begin) * c.heads * dv_of(c)));
  attention_reference(node.attention(), s.q.slice_rows(begin, end).data<float>(),
                      positions.data<int32_t>(), end - begin, s.k.data<float>(), s.v.data<float>(),
                      end, c.sinks ? s.sinks.data<float>() : nullptr, out.data());
  return out;
}

const std::vector<AttnCase>& attention_cases() {
  static const std::vector<AttnCase> cases = {
      {1, 1, 1, 0},                      // smallest
      {4, 4, 16, 0},                     // MHA (ratio 1)
      {4, 2, 16, 0},                     // GQA ratio 2
      {8, 2, 12, 0, 0, 0, false, 0.3f},  // ratio 4, explicit scale
      {6, 3, 64, 0, 5},                  // sliding window 5
      {4, 1, 16, 0, 0, 7},               // Llama-4 chunks of 7
      {4, 2, 32, 0, 0, 0, true},         // GPT-OSS sinks
      {4, 2, 32, 0, 70, 0, true},        // sinks + window across key blocks
      {2, 1, 24, 16},                    // MLA: v_head_dim != head_dim
      {3, 3, 5, 9, 4, 6, true},          // everything, odd sizes
  };
  return cases;
}

TEST(AttentionOp, PrefillMatchesReference) {
  uint32_t seed = 400;
  for (const AttnCase& c : attention_cases()) {
    for (int64_t tokens : {1, 3, 19, 150}) {
      SCOPED_TRACE(case_str(c) + fmt::format(" T={}", tokens));
      seed += 10;
      const Sequence s = make_sequence(c, tokens, seed);
      testing::CompiledOp op(attention_node(c), call_inputs(s, 0, tokens), {}, 3);
      std::vector<Tensor> out = op.run(call_inputs(s, 0, tokens));
      ASSERT_EQ(out[0].shape(), (Shape{tokens, c.heads * dv_of(c)}));
      EXPECT_LT(testing::normalized_error(testing::span_of(out[0]), reference(c, s, 0, tokens)),
                1e-5);
    }
  }
}

TEST(AttentionOp, PrefillEqualsTokenByTokenDecode) {
  uint32_t seed = 500;
  for (const AttnCase& c : attention_cases()) {
    SCOPED_TRACE(case_str(c));
    const int64_t len = 75;
    seed += 10;
    const Sequence s = make_sequence(c, len, seed);
    testing::CompiledOp prefill(attention_node(c), call_inputs(s, 0, len), {}, 2);
    std::vector<Tensor> all = prefill.run(call_inputs(s, 0, len));
    testing::CompiledOp decode(attention_node(c), call_inputs(s, 0, 1), {}, 2);
    const int64_t width = c.heads * dv_of(c);
    for (int64_t t = 0; t < len; ++t) {
      std::vector<Tensor> one = decode.run(call_inputs(s, t, t + 1));
      std::span<const float> row(all[0].data<float>() + t * width, static_cast<size_t>(width));
      ASSERT_LT(testing::normalized_error(testing::span_of(one[0]), row), 1e-6) << "token " << t;
    }
  }
}

TEST(AttentionOp, ChunkedPrefillThenDecodeMatchesReference) {
  uint32_t seed = 600;
  // Calls of these sizes, one after another on the same state (the KV cache).
  const std::vector<int64_t> calls = {9, 3, 1, 1, 64, 1, 17, 1};
  for (const AttnCase& c : attention_cases()) {
    SCOPED_TRACE(case_str(c));
    int64_t len = 0;
    for (int64_t n : calls) len += n;
    seed += 10;
    const Sequence s = make_sequence(c, len, seed);
    testing::CompiledOp op(attention_node(c), call_inputs(s, 0, 1), {}, 4);
    int64_t begin = 0;
    for (int64_t n : calls) {
      std::vector<Tensor> out = op.run(call_inputs(s, begin, begin + n));
      EXPECT_LT(
          testing::normalized_error(testing::span_of(out[0]), reference(c, s, begin, begin + n)),
          1e-5)
          << "call at " << begin << " of " << n << " tokens";
      begin += n;
    }
  }
}

TEST(AttentionOp, SinkHandValues) {
  // One head, one key with score 0 (q = 0): P = 1 / (1 + exp(σ)). σ = 0 -> v / 2, σ = ln 3 -> v
  // / 4.
  AttnCase c{1, 1, 2, 0, 0, 0, true};
  const float zeros[] = {0, 0};
  const float kv[] = {1, -2};
  for (auto [sink, fraction] : {std::pair{0.0f, 0.5f}, std::pair{std::log(3.0f), 0.25f}}) {
    const float sink_values[] = {sink};
    std::vector<Tensor> inputs = {testing::tensor_from({1, 2}, zeros),
                                  testing::tensor_from({1, 2}, kv),
                                  testing::tensor_from({1, 2}, kv), testing::i32_tensor({0}),
                                  testing::tensor_from({1}, sink_values)};
    std::vector<Tensor> out = testing::run_cpu_op(attention_node(c), inputs);
    EXPECT_NEAR(out[0].data<float>()[0], 1 * fraction, 1e-6);
    EXPECT_NEAR(out[0].data<float>()[1], -2 * fraction, 1e-6);
  }
}

TEST(AttentionOp, PositionPastMaxSeqLenIsAnError) {
  AttnCase c{2, 1, 8, 0};
  const Sequence s = make_sequence(c, 10, 7);
  CompileOptions options;
  options.max_seq_len = 8;
  testing::CompiledOp op(attention_node(c), call_inputs(s, 0, 1), options);
  op.run(call_inputs(s, 0, 8));  // positions 0..7 fit
  testing::expect_error([&] { op.run(call_inputs(s, 8, 9)); }, {"position 8", "max_seq_len = 8"});
  std::vector<Tensor> negative = call_inputs(s, 0, 1);
  negative[3] = testing::i32_tensor({-1});
  testing::expect_error([&] { op.run(negative); }, {"position -1", "negative"});
}

TEST(AttentionOp, RejectsBadParams) {
  auto types = [](const AttnCase& c) {
    std::vector<std::optional<ValueType>> t = {
        ValueType{DType::kF32, {kTokens, c.heads * c.head_dim}},
        ValueType{DType::kF32, {kTokens, c.kv_heads * c.head_dim}},
        ValueType{DType::kF32, {kTokens, c.kv_heads * dv_of(c)}}, ValueType{DType::kI32, {kTokens}},
        std::nullopt};
    if (c.sinks) t[4] = ValueType{DType::kF32, {c.heads}};
    return t;
  };
  const AttnCase ok{8, 2, 16, 0};
  EXPECT_EQ(testing::infer_op(attention_node(ok), types(ok))[0],
            (ValueType{DType::kF32, {kTokens, 128}}));

  AttnCase uneven{6, 4, 16, 0};
  testing::expect_error(
      [&] {
        testing::infer_op(attention_node(uneven), types(AttnCase{8, 4, 16, 0}));
      },
      {"attention: num_heads 6 is not divisible by num_kv_heads 4"});
  auto bad_q = types(ok);
  bad_q[0] = ValueType{DType::kF32, {kTokens, 100}};
  testing::expect_error(
      [&] { testing::infer_op(attention_node(ok), bad_q); },
      {"q must have num_heads * head_dim = 8 * 16 = 128 features", "F32[T, 100]"});
  AttnCase mla{8, 2, 16, 8};
  testing::expect_error([&] { testing::infer_op(attention_node(mla), types(ok)); },
                        {"v must have num_kv_heads * v_head_dim = 2 * 8 = 16 features"});
  AttnCase with_sinks = ok;
  with_sinks.sinks = true;
  testing::expect_error([&] { testing::infer_op(attention_node(with_sinks), types(ok)); },
                        {"sinks", "absent", "has_sinks is true"});
  auto bad_sinks = types(with_sinks);
  bad_sinks[4] = ValueType{DType::kF32, {4}};
  testing::expect_error([&] { testing::infer_op(attention_node(with_sinks), bad_sinks); },
                        {"sinks must have shape [8]"});
  auto bad_positions = types(ok);
  bad_positions[3] = ValueType{DType::kF32, {kTokens}};
  testing::expect_error([&] { testing::infer_op(attention_node(ok), bad_positions); },
                        {"positions must be I32[T]"});
  AttnCase negative_window = ok;
  negative_window.window = -1;
  testing::expect_error([&] { testing::infer_op(attention_node(negative_window), types(ok)); },
                        {"sliding_window -1"});
}

}  // namespace
}  // namespace mg
