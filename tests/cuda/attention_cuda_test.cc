// The CUDA attention kernel against the fp64 reference: prefill over every attention case of the
// shared op case table (tests/testing/op_cases.cc: GQA ratios, explicit scale, sliding window,
// chunks, sinks, v_head_dim != head_dim, odd and model-sized heads), and for the table's configs
// prefill == token-by-token decode on the device and chunked calls on one KV cache. Calls of up to
// cuda::kSplitKvMaxTokens rows go through the split-KV decode kernel where the head sizes allow
// (attention_decode_cuda_test.cc tests it against the per-query kernel directly).
#include <gtest/gtest.h>

#include <iostream>

#include "ops/nn/attention/attention.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/testing/op_cases.h"
#include "tests/unit/ops/nn_test_util.h"

namespace mg {
namespace {

#ifdef MG_WITH_CUDA

using testing::attention_v_head_dim;
using testing::DeviceOp;
using testing::DtypeTolerance;

proto::AttentionParams attention_params(int64_t heads, int64_t kv_heads, int64_t head_dim) {
  proto::AttentionParams p;
  p.set_num_heads(heads);
  p.set_num_kv_heads(kv_heads);
  p.set_head_dim(head_dim);
  return p;
}

proto::Node attention_node(const proto::AttentionParams& p) {
  proto::Node node;
  node.set_name("attn");
  node.set_op("attention");
  *node.mutable_attention() = p;
  return node;
}

struct Sequence {
  Tensor q, k, v, sinks;
};

// q, k, v rows of positions 0..len-1, already rounded through `dtype`.
Sequence make_sequence(const proto::AttentionParams& p, int64_t len, uint32_t seed, DType dtype) {
  Sequence s;
  s.q = testing::round_through(
      testing::random_tensor({len, p.num_heads() * p.head_dim()}, seed, -3.0f, 3.0f), dtype);
  s.k = testing::round_through(
      testing::random_tensor({len, p.num_kv_heads() * p.head_dim()}, seed + 1, -2.0f, 2.0f), dtype);
  s.v = testing::round_through(
      testing::random_tensor({len, p.num_kv_heads() * attention_v_head_dim(p)}, seed + 2), dtype);
  if (p.has_sinks()) {
    s.sinks = testing::round_through(testing::random_tensor({p.num_heads()}, seed + 3, -2.0f, 4.0f),
                                     dtype);
  }
  return s;
}

std::vector<Tensor> call_inputs(const Sequence& s, int64_t begin, int64_t end) {
  return {s.q.slice_rows(begin, end), s.k.slice_rows(begin, end), s.v.slice_rows(begin, end),
          testing::positions_tensor(end - begin, static_cast<int32_t>(begin)), s.sinks};
}

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

// The table's attention configs the GPU runs (testing::attention_configs() less the cpu_only
// ones, whose reason is printed).
std::vector<const testing::AttentionConfig*> gpu_configs() {
  std::vector<const testing::AttentionConfig*> out;
  for (const testing::AttentionConfig& config : testing::attention_configs()) {
    if (config.cpu_only.empty()) {
      out.push_back(&config);
    } else {
      std::cout << "[ CPU ONLY ] attention " << config.name << ": " << config.cpu_only << "\n";
    }
  }
  return out;
}

// Prefill of every attention config of the shared table (tests/testing/op_cases.cc) at 1, 3, 19
// and 150 tokens against attention_reference, in every dtype.
TEST(CudaAttention, PrefillMatchesReference) {
  MG_REQUIRE_GPU();
  testing::expect_cuda_cases_match_reference("attention");
}

TEST(CudaAttention, PrefillEqualsTokenByTokenDecode) {
  MG_REQUIRE_GPU();
  uint32_t seed = 2500;
  const std::vector<const testing::AttentionConfig*> configs = gpu_configs();
  for (const DtypeTolerance& d : testing::cuda_dtypes()) {
    for (const testing::AttentionConfig* config : configs) {
      SCOPED_TRACE(fmt::format("{} {}", dtype_name(d.dtype), config->name));
      const proto::AttentionParams& p = config->params;
      const int64_t len = 75;
      seed += 10;
      const Sequence s = make_sequence(p, len, seed, d.dtype);
      DeviceOp prefill(attention_node(p), call_inputs(s, 0, len), d.dtype);
      std::vector<Tensor> all = prefill.run(call_inputs(s, 0, len));
      DeviceOp decode(attention_node(p), call_inputs(s, 0, 1), d.dtype);
      const int64_t width = p.num_heads() * attention_v_head_dim(p);
      for (int64_t t = 0; t < len; ++t) {
        std::vector<Tensor> one = decode.run(call_inputs(s, t, t + 1));
        std::span<const float> row(all[0].data<float>() + t * width, static_cast<size_t>(width));
        // One-token calls take the split-KV kernel where the head sizes allow it, the 75-token
        // prefill the per-query kernel: the same sums in another order, so equal to within the
        // dtype's rounding (F32 ~1e-7; a 16-bit output may round the other way).
        ASSERT_LT(testing::normalized_error(testing::span_of(one[0]), row), d.tolerance)
            << "token " << t;
      }
    }
  }
}

TEST(CudaAttention, ChunkedPrefillThenDecodeMatchesReference) {
  MG_REQUIRE_GPU();
  uint32_t seed = 2600;
  const std::vector<int64_t> calls = {9, 3, 1, 1, 64, 1, 17, 1};
  const std::vector<const testing::AttentionConfig*> configs = gpu_configs();
  for (const DtypeTolerance& d : testing::cuda_dtypes()) {
    for (const testing::AttentionConfig* config : configs) {
      SCOPED_TRACE(fmt::format("{} {}", dtype_name(d.dtype), config->name));
      const proto::AttentionParams& p = config->params;
      int64_t len = 0;
      for (int64_t n : calls) len += n;
      seed += 10;
      const Sequence s = make_sequence(p, len, seed, d.dtype);
      DeviceOp op(attention_node(p), call_inputs(s, 0, 1), d.dtype);
      int64_t begin = 0;
      for (int64_t n : calls) {
        std::vector<Tensor> out = op.run(call_inputs(s, begin, begin + n));
        EXPECT_LT(
            testing::normalized_error(testing::span_of(out[0]), reference(p, s, begin, begin + n)),
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
  proto::AttentionParams c = attention_params(8, 2, 64);
  c.set_has_sinks(true);
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
  const proto::AttentionParams c = attention_params(1, 1, 576);
  const Sequence s = make_sequence(c, 1, 1, DType::kBF16);
  testing::expect_error([&] { DeviceOp op(attention_node(c), call_inputs(s, 0, 1), DType::kBF16); },
                        {"head_dim and v_head_dim up to 512", "576"});
}

#endif  // MG_WITH_CUDA

}  // namespace
}  // namespace mg
