// The CUDA attention kernel against the fp64 reference: prefill over every variant of the CPU
// test (GQA ratios, explicit scale, sliding window, chunks, sinks, v_head_dim != head_dim, odd
// sizes), prefill == token-by-token decode on the device, and chunked calls on one KV cache.
#include <gtest/gtest.h>

#include "ops/nn/attention/attention.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/unit/ops/nn_test_util.h"

namespace mg {
namespace {

#ifdef MG_WITH_CUDA

using testing::DeviceOp;
using testing::DtypeTolerance;

struct AttnCase {
  int64_t heads, kv_heads, head_dim, v_head_dim;  // v_head_dim 0: = head_dim
  int64_t window = 0;
  int64_t chunk = 0;
  bool sinks = false;
  std::optional<float> scale = std::nullopt;
};

std::string case_str(const AttnCase& c) {
  return fmt::format("H={} KV={} D={} Dv={} W={} C={} sinks={}", c.heads, c.kv_heads, c.head_dim,
                     c.v_head_dim, c.window, c.chunk, c.sinks);
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

struct Sequence {
  Tensor q, k, v, sinks;
};

// q, k, v rows of positions 0..len-1, already rounded through `dtype`.
Sequence make_sequence(const AttnCase& c, int64_t len, uint32_t seed, DType dtype) {
  Sequence s;
  s.q = testing::round_through(
      testing::random_tensor({len, c.heads * c.head_dim}, seed, -3.0f, 3.0f), dtype);
  s.k = testing::round_through(
      testing::random_tensor({len, c.kv_heads * c.head_dim}, seed + 1, -2.0f, 2.0f), dtype);
  s.v =
      testing::round_through(testing::random_tensor({len, c.kv_heads * dv_of(c)}, seed + 2), dtype);
  if (c.sinks) {
    s.sinks =
        testing::round_through(testing::random_tensor({c.heads}, seed + 3, -2.0f, 4.0f), dtype);
  }
  return s;
}

std::vector<Tensor> call_inputs(const Sequence& s, int64_t begin, int64_t end) {
  return {s.q.slice_rows(begin, end), s.k.slice_rows(begin, end), s.v.slice_rows(begin, end),
          testing::positions_tensor(end - begin, static_cast<int32_t>(begin)), s.sinks};
}

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
      {8, 2, 128, 0},                    // Llama-like head size
      {4, 1, 192, 128},                  // DeepSeek-like: qk 192, v 128
      {2, 2, 256, 0, 0, 0, true},        // the widest common head
  };
  return cases;
}

TEST(CudaAttention, PrefillMatchesReference) {
  MG_REQUIRE_GPU();
  uint32_t seed = 2400;
  for (const DtypeTolerance& d : testing::cuda_dtypes()) {
    for (const AttnCase& c : attention_cases()) {
      for (int64_t tokens : {1, 3, 19, 150}) {
        SCOPED_TRACE(fmt::format("{} {} T={}", dtype_name(d.dtype), case_str(c), tokens));
        seed += 10;
        const Sequence s = make_sequence(c, tokens, seed, d.dtype);
        DeviceOp op(attention_node(c), call_inputs(s, 0, tokens), d.dtype);
        std::vector<Tensor> out = op.run(call_inputs(s, 0, tokens));
        ASSERT_EQ(out[0].shape(), (Shape{tokens, c.heads * dv_of(c)}));
        EXPECT_LT(testing::normalized_error(testing::span_of(out[0]), reference(c, s, 0, tokens)),
                  d.tolerance);
      }
    }
  }
}

TEST(CudaAttention, PrefillEqualsTokenByTokenDecode) {
  MG_REQUIRE_GPU();
  uint32_t seed = 2500;
  for (const DtypeTolerance& d : testing::cuda_dtypes()) {
    for (const AttnCase& c : attention_cases()) {
      SCOPED_TRACE(fmt::format("{} {}", dtype_name(d.dtype), case_str(c)));
      const int64_t len = 75;
      seed += 10;
      const Sequence s = make_sequence(c, len, seed, d.dtype);
      DeviceOp prefill(attention_node(c), call_inputs(s, 0, len), d.dtype);
      std::vector<Tensor> all = prefill.run(call_inputs(s, 0, len));
      DeviceOp decode(attention_node(c), call_inputs(s, 0, 1), d.dtype);
      const int64_t width = c.heads * dv_of(c);
      for (int64_t t = 0; t < len; ++t) {
        std::vector<Tensor> one = decode.run(call_inputs(s, t, t + 1));
        std::span<const float> row(all[0].data<float>() + t * width, static_cast<size_t>(width));
        // The same kernel on the same cache: identical arithmetic, so identical results.
        ASSERT_LT(testing::normalized_error(testing::span_of(one[0]), row), 1e-6) << "token " << t;
      }
    }
  }
}

TEST(CudaAttention, ChunkedPrefillThenDecodeMatchesReference) {
  MG_REQUIRE_GPU();
  uint32_t seed = 2600;
  const std::vector<int64_t> calls = {9, 3, 1, 1, 64, 1, 17, 1};
  for (const DtypeTolerance& d : testing::cuda_dtypes()) {
    for (const AttnCase& c : attention_cases()) {
      SCOPED_TRACE(fmt::format("{} {}", dtype_name(d.dtype), case_str(c)));
      int64_t len = 0;
      for (int64_t n : calls) len += n;
      seed += 10;
      const Sequence s = make_sequence(c, len, seed, d.dtype);
      DeviceOp op(attention_node(c), call_inputs(s, 0, 1), d.dtype);
      int64_t begin = 0;
      for (int64_t n : calls) {
        std::vector<Tensor> out = op.run(call_inputs(s, begin, begin + n));
        EXPECT_LT(
            testing::normalized_error(testing::span_of(out[0]), reference(c, s, begin, begin + n)),
            d.tolerance)
            << "call at " << begin << " of " << n << " tokens";
        begin += n;
      }
    }
  }
}

TEST(CudaAttention, LongContextDecodeMatchesReference) {
  MG_REQUIRE_GPU();
  // A 2000-token prefill, then decode steps: keys are streamed by every warp many times over.
  const AttnCase c{8, 2, 64, 0, 0, 0, true};
  const int64_t prompt = 2000, steps = 3;
  const Sequence s = make_sequence(c, prompt + steps, 2700, DType::kBF16);
  DeviceOp op(attention_node(c), call_inputs(s, 0, 1), DType::kBF16, /*max_seq_len=*/4096);
  op.run(call_inputs(s, 0, prompt));
  for (int64_t t = prompt; t < prompt + steps; ++t) {
    std::vector<Tensor> out = op.run(call_inputs(s, t, t + 1));
    EXPECT_LT(testing::normalized_error(testing::span_of(out[0]), reference(c, s, t, t + 1)), 1e-2)
        << "position " << t;
  }
}

TEST(CudaAttention, HeadDimBeyondTheKernelIsAClearError) {
  MG_REQUIRE_GPU();
  const AttnCase c{1, 1, 576, 0};
  const Sequence s = make_sequence(c, 1, 1, DType::kBF16);
  testing::expect_error([&] { DeviceOp op(attention_node(c), call_inputs(s, 0, 1), DType::kBF16); },
                        {"head_dim and v_head_dim up to 512", "576"});
}

#endif  // MG_WITH_CUDA

}  // namespace
}  // namespace mg
