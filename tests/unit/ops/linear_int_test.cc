// The weight-only integer linear on the CPU (int4 / uint4 / int8 / uint8 codes, groups that do not
// divide the input, channel-wise, act-order g_idx) against an fp64 reference on the dequantized
// weight; one token and many, bias and scale.
#include <algorithm>
#include <random>

#include <gtest/gtest.h>

#include "framework/core/int_quant.h"
#include "framework/core/thread_pool.h"
#include "framework/op/op_registry.h"
#include "tests/testing/test_util.h"

namespace mg {
namespace {

std::vector<float> reference(const std::vector<float>& x, int64_t tokens, const Tensor& deq,
                             const Tensor& bias, float scale) {
  const int64_t out = deq.dim(0), in = deq.dim(1);
  std::vector<float> y(static_cast<size_t>(tokens * out));
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t o = 0; o < out; ++o) {
      double acc = bias.defined() ? bias.data<float>()[o] : 0.0;
      for (int64_t i = 0; i < in; ++i) {
        acc += static_cast<double>(x[t * in + i]) * deq.data<float>()[o * in + i];
      }
      y[t * out + o] = static_cast<float>(acc * scale);
    }
  }
  return y;
}

TEST(LinearInt, MatchesTheDequantizedReference) {
  const OpDef* def = OpRegistry::global().find("linear");
  ASSERT_NE(def, nullptr);
  ThreadPool pool(3);
  struct Case {
    int64_t out, in;
    QuantElement element;
    int64_t group;
    bool act_order, bias;
    float scale;
  };
  const Case cases[] = {
      {300, 200, QuantElement::kUInt4, 128, false, true, 1.0f},
      {97, 131, QuantElement::kInt4, 32, false, false, 0.5f},
      {33, 64, QuantElement::kUInt4, 16, true, true, 1.0f},
      {70, 45, QuantElement::kInt8, -1, false, false, 1.0f},
      {1, 7, QuantElement::kUInt8, 64, false, true, 2.0f},
  };
  uint32_t seed = 70;
  for (const Case& c : cases) {
    auto [codes, q] =
        quantize_int_cpu(testing::random_tensor({c.out, c.in}, seed += 3), c.element, c.group);
    if (c.act_order) {
      // A non-monotonic g_idx: columns take groups in a shuffled order.
      q.g_idx = Tensor::empty_cpu(DType::kI32, {1, c.in});
      std::vector<int32_t> g(static_cast<size_t>(c.in));
      for (int64_t i = 0; i < c.in; ++i) g[i] = static_cast<int32_t>(i / c.group);
      std::shuffle(g.begin(), g.end(), std::mt19937(seed));
      std::copy(g.begin(), g.end(), q.g_idx.data<int32_t>());
    }
    const Tensor deq = dequantize_cpu(codes, q);
    for (const int64_t tokens : {1, 5, 70}) {
      SCOPED_TRACE(fmt::format("out={} in={} {} group={} T={}", c.out, c.in,
                               quant_element_name(c.element), c.group, tokens));
      const Tensor bias = c.bias ? testing::random_tensor({c.out}, seed + 2) : Tensor();
      proto::Node node;
      node.set_name("proj");
      node.set_op("linear");
      node.mutable_linear()->set_has_bias(c.bias);
      if (c.scale != 1.0f) node.mutable_linear()->set_scale(c.scale);
      CompileOptions options;
      const std::vector<std::optional<ValueType>> types = {
          ValueType{DType::kF32, {kTokens, c.in}},
          ValueType{int_codes_dtype(c.element), {c.out, c.in}, GroupShape{1, c.group}, c.element},
          c.bias ? std::optional<ValueType>(ValueType{DType::kF32, {c.out}}) : std::nullopt};
      const std::vector<Tensor> weights = {Tensor(), codes, bias};
      const std::vector<WeightQuantization> quant = {{}, q, {}};
      const KernelContext ctx{node, options, types, weights, quant};
      const std::unique_ptr<OpKernel> kernel = def->create_kernel(ctx);
      EXPECT_NE(kernel->describe().find(quant_element_name(c.element)), std::string::npos);

      const std::vector<float> x = testing::random_floats(tokens * c.in, seed + 1, -2.0f, 2.0f);
      Tensor xt = Tensor::empty_cpu(DType::kF32, {tokens, c.in});
      std::copy(x.begin(), x.end(), xt.data<float>());
      Tensor y = Tensor::empty_cpu(DType::kF32, {tokens, c.out});
      std::vector<uint8_t> ws(kernel->workspace_bytes(tokens));
      ExecContext ec;
      ec.pool = &pool;
      ec.workspace = ws.data();
      ec.workspace_bytes = ws.size();
      const std::vector<Tensor> in = {xt, Tensor(), bias};
      kernel->run(ec, in, std::span<const Tensor>(&y, 1));
      const std::vector<float> got(y.data<float>(), y.data<float>() + y.numel());
      EXPECT_LE(testing::normalized_error(got, reference(x, tokens, deq, bias, c.scale)), 1e-5);
    }
  }
}

}  // namespace
}  // namespace mg
