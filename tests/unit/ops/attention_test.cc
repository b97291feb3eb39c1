#include <gtest/gtest.h>

#include <cmath>

#include "ops/nn/attention/attention.h"
#include "tests/testing/op_case_check.h"
#include "tests/testing/op_cases.h"
#include "tests/testing/op_harness.h"
#include "tests/testing/test_util.h"
#include "tests/unit/ops/nn_test_util.h"

namespace mg {
namespace {

using testing::attention_v_head_dim;

proto::AttentionParams attention_params(int64_t heads, int64_t kv_heads, int64_t head_dim,
                                        int64_t v_head_dim = 0) {
  proto::AttentionParams p;
  p.set_num_heads(heads);
  p.set_num_kv_heads(kv_heads);
  p.set_head_dim(head_dim);
  p.set_v_head_dim(v_head_dim);
  return p;
}

proto::Node attention_node(const proto::AttentionParams& p) {
  proto::Node node;
  node.set_name("attn");
  node.set_op("attention");
  *node.mutable_attention() = p;
  return node;
}

// A whole sequence of q, k, v rows for positions 0..len-1.
struct Sequence {
  Tensor q, k, v, sinks;
};

Sequence make_sequence(const proto::AttentionParams& p, int64_t len, uint32_t seed) {
  Sequence s;
  s.q = testing::random_tensor({len, p.num_heads() * p.head_dim()}, seed, -3.0f, 3.0f);
  s.k = testing::random_tensor({len, p.num_kv_heads() * p.head_dim()}, seed + 1, -2.0f, 2.0f);
  s.v = testing::random_tensor({len, p.num_kv_heads() * attention_v_head_dim(p)}, seed + 2);
  if (p.has_sinks()) s.sinks = testing::random_tensor({p.num_heads()}, seed + 3, -2.0f, 4.0f);
  return s;
}

// Inputs for the rows [begin, end) of the sequence.
std::vector<Tensor> call_inputs(const Sequence& s, int64_t begin, int64_t end) {
  return {s.q.slice_rows(begin, end), s.k.slice_rows(begin, end), s.v.slice_rows(begin, end),
          testing::positions_tensor(end - begin, static_cast<int32_t>(begin)), s.sinks};
}

// Reference output of rows [begin, end) given the keys of every position < end.
std::vector<float> reference(const proto::AttentionParams& p, const Sequence& s, int64_t begin,
                             int64_t end) {
  const Tensor positions = testing::positions_tensor(end - begin, static_cast<int32_t>(begin));
  std::vector<float> out(
      static_cast<size_t>((end - begin) * p.num_heads() * attention_v_head_dim(p)));
  attention_reference(p, s.q.slice_rows(begin, end).data<float>(), positions.data<int32_t>(),
                      end - begin, s.k.data<float>(), s.v.data<float>(), end,
                      p.has_sinks() ? s.sinks.data<float>() : nullptr, out.data());
  return out;
}

// Prefill of every attention config of the shared table (tests/testing/op_cases.cc) at 1, 3, 19
// and 150 tokens against attention_reference.
TEST(AttentionOp, PrefillMatchesReference) {
  testing::expect_cpu_cases_match_reference("attention");
}

// The table's attention configs, one token at a time on one KV cache == one prefill.
TEST(AttentionOp, PrefillEqualsTokenByTokenDecode) {
  uint32_t seed = 500;
  for (const testing::AttentionConfig& config : testing::attention_configs()) {
    SCOPED_TRACE(config.name);
    const proto::AttentionParams& p = config.params;
    const int64_t len = 75;
    seed += 10;
    const Sequence s = make_sequence(p, len, seed);
    testing::CompiledOp prefill(attention_node(p), call_inputs(s, 0, len), {}, 2);
    std::vector<Tensor> all = prefill.run(call_inputs(s, 0, len));
    testing::CompiledOp decode(attention_node(p), call_inputs(s, 0, 1), {}, 2);
    const int64_t width = p.num_heads() * attention_v_head_dim(p);
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
  for (const testing::AttentionConfig& config : testing::attention_configs()) {
    SCOPED_TRACE(config.name);
    const proto::AttentionParams& p = config.params;
    int64_t len = 0;
    for (int64_t n : calls) len += n;
    seed += 10;
    const Sequence s = make_sequence(p, len, seed);
    testing::CompiledOp op(attention_node(p), call_inputs(s, 0, 1), {}, 4);
    int64_t begin = 0;
    for (int64_t n : calls) {
      std::vector<Tensor> out = op.run(call_inputs(s, begin, begin + n));
      EXPECT_LT(
          testing::normalized_error(testing::span_of(out[0]), reference(p, s, begin, begin + n)),
          1e-5)
          << "call at " << begin << " of " << n << " tokens";
      begin += n;
    }
  }
}

TEST(AttentionOp, SinkHandValues) {
  // One head, one key with score 0 (q = 0): P = 1 / (1 + exp(σ)). σ = 0 -> v / 2, σ = ln 3 -> v
  // / 4.
  proto::AttentionParams c = attention_params(1, 1, 2);
  c.set_has_sinks(true);
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
  const proto::AttentionParams c = attention_params(2, 1, 8);
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
  auto types = [](const proto::AttentionParams& c) {
    std::vector<std::optional<ValueType>> t = {
        ValueType{DType::kF32, {kTokens, c.num_heads() * c.head_dim()}},
        ValueType{DType::kF32, {kTokens, c.num_kv_heads() * c.head_dim()}},
        ValueType{DType::kF32, {kTokens, c.num_kv_heads() * attention_v_head_dim(c)}},
        ValueType{DType::kI32, {kTokens}}, std::nullopt};
    if (c.has_sinks()) t[4] = ValueType{DType::kF32, {c.num_heads()}};
    return t;
  };
  const proto::AttentionParams ok = attention_params(8, 2, 16);
  EXPECT_EQ(testing::infer_op(attention_node(ok), types(ok))[0],
            (ValueType{DType::kF32, {kTokens, 128}}));

  const proto::AttentionParams uneven = attention_params(6, 4, 16);
  testing::expect_error(
      [&] { testing::infer_op(attention_node(uneven), types(attention_params(8, 4, 16))); },
      {"attention: num_heads 6 is not divisible by num_kv_heads 4"});
  auto bad_q = types(ok);
  bad_q[0] = ValueType{DType::kF32, {kTokens, 100}};
  testing::expect_error(
      [&] { testing::infer_op(attention_node(ok), bad_q); },
      {"q must have num_heads * head_dim = 8 * 16 = 128 features", "F32[T, 100]"});
  const proto::AttentionParams mla = attention_params(8, 2, 16, 8);
  testing::expect_error([&] { testing::infer_op(attention_node(mla), types(ok)); },
                        {"v must have num_kv_heads * v_head_dim = 2 * 8 = 16 features"});
  proto::AttentionParams with_sinks = ok;
  with_sinks.set_has_sinks(true);
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
  proto::AttentionParams negative_window = ok;
  negative_window.set_sliding_window(-1);
  testing::expect_error([&] { testing::infer_op(attention_node(negative_window), types(ok)); },
                        {"sliding_window -1"});
}

}  // namespace
}  // namespace mg
