#include <gtest/gtest.h>

#include "framework/core/thread_pool.h"
#include "ops/nn/linear/linear.h"
#include "ops/nn/linear/linear_gemm.h"
#include "tests/testing/op_harness.h"
#include "tests/testing/test_util.h"
#include "tests/unit/ops/nn_test_util.h"

namespace mg {
namespace {

proto::Node linear_node(bool has_bias, std::optional<float> scale) {
  proto::Node node;
  node.set_name("proj");
  node.set_op("linear");
  auto* p = node.mutable_linear();
  p->set_has_bias(has_bias);
  if (scale) p->set_scale(*scale);
  return node;
}

TEST(LinearOp, MatchesReference) {
  struct Case {
    int64_t tokens, in, out;
    bool bias;
    std::optional<float> scale;
    int threads;
  };
  const std::vector<Case> cases = {
      {1, 1, 1, false, std::nullopt, 1},    {1, 7, 5, true, std::nullopt, 2},
      {1, 64, 257, false, std::nullopt, 4}, {1, 512, 1000, true, 0.25f, 3},
      {3, 17, 33, true, 2.0f, 2},           {17, 130, 48, false, std::nullopt, 4},
      {64, 96, 200, true, 0.5f, 4},         {129, 33, 15, false, 1.5f, 1},
  };
  uint32_t seed = 200;
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << "T=" << c.tokens << " in=" << c.in << " out=" << c.out
                                      << " bias=" << c.bias << " threads=" << c.threads);
    Tensor x = testing::random_tensor({c.tokens, c.in}, ++seed);
    Tensor w = testing::random_tensor({c.out, c.in}, ++seed);
    Tensor b = c.bias ? testing::random_tensor({c.out}, ++seed) : Tensor();
    std::vector<Tensor> inputs = {x, w};
    if (c.bias) inputs.push_back(b);
    std::vector<Tensor> y = testing::run_cpu_op(linear_node(c.bias, c.scale), inputs, c.threads);
    ASSERT_EQ(y[0].shape(), (Shape{c.tokens, c.out}));
    std::vector<float> ref(static_cast<size_t>(c.tokens * c.out));
    linear_reference(x.data<float>(), c.tokens, c.in, w.data<float>(), c.out,
                     c.bias ? b.data<float>() : nullptr, c.scale.value_or(1.0f), ref.data());
    EXPECT_LT(testing::normalized_error(testing::span_of(y[0]), ref), 1e-5);
  }
}

TEST(LinearOp, GemmHelperWithAndWithoutPool) {
  ThreadPool pool(4);
  for (int64_t tokens : {1, 2, 31}) {
    for (int64_t out : {1, 16, 17, 300}) {
      SCOPED_TRACE(::testing::Message() << "T=" << tokens << " out=" << out);
      const int64_t in = 45;
      std::vector<float> x = testing::random_floats(tokens * in, 1);
      std::vector<float> w = testing::random_floats(out * in, 2);
      std::vector<float> ref(tokens * out), y_pool(tokens * out), y_inline(tokens * out);
      linear_reference(x.data(), tokens, in, w.data(), out, nullptr, 1.0f, ref.data());
      cpu_gemm_xwt(x.data(), tokens, in, w.data(), out, y_pool.data(), &pool);
      cpu_gemm_xwt(x.data(), tokens, in, w.data(), out, y_inline.data(), nullptr);
      EXPECT_LT(testing::normalized_error(y_pool, ref), 1e-5);
      EXPECT_LT(testing::normalized_error(y_inline, ref), 1e-5);
    }
  }
}

TEST(LinearOp, RejectsBadShapes) {
  const ValueType x{DType::kF32, {kTokens, 64}};
  testing::expect_error(
      [&] {
        testing::infer_op(linear_node(false, std::nullopt), {x, ValueType{DType::kF32, {32, 48}}});
      },
      {"weight must have shape [out, in] = [*, 64], got F32[32, 48]"});
  testing::expect_error(
      [&] {
        testing::infer_op(linear_node(true, std::nullopt),
                          {x, ValueType{DType::kF32, {32, 64}}, ValueType{DType::kF32, {31}}});
      },
      {"bias must have shape [32]"});
  testing::expect_error(
      [&] {
        testing::infer_op(linear_node(true, std::nullopt), {x, ValueType{DType::kF32, {32, 64}}});
      },
      {"bias", "absent", "has_bias is true"});
  testing::expect_error(
      [&] {
        testing::infer_op(linear_node(false, std::nullopt),
                          {x, ValueType{DType::kF32, {32, 64}}, ValueType{DType::kF32, {32}}});
      },
      {"bias", "present", "has_bias is false"});
  testing::expect_error(
      [&] {
        testing::infer_op(linear_node(false, std::nullopt), {ValueType{DType::kI32, {kTokens, 64}},
                                                             ValueType{DType::kF32, {32, 64}}});
      },
      {"x must be F32, F16, BF16 or F64"});
  const auto types =
      testing::infer_op(linear_node(false, 2.0f), {x, ValueType{DType::kBF16, {32, 64}}});
  EXPECT_EQ(types[0], (ValueType{DType::kF32, {kTokens, 32}}));
}

}  // namespace
}  // namespace mg
