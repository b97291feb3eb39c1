#include <gtest/gtest.h>

#include "framework/core/thread_pool.h"
#include "ops/nn/linear/linear.h"
#include "ops/nn/linear/linear_gemm.h"
#include "tests/testing/op_case_check.h"
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

// Every linear case of the shared table (tests/testing/op_cases.cc), on 1 to 4 threads.
TEST(LinearOp, MatchesReference) {
  testing::expect_cpu_cases_match_reference("linear");
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

proto::Node split_linear_node(bool has_bias, std::optional<float> scale,
                              const std::vector<int64_t>& features) {
  proto::Node node = linear_node(has_bias, scale);
  for (const int64_t n : features) node.mutable_linear()->add_output_features(n);
  return node;
}

// output_features (the fuse-ops pass's q/k/v): one output per row block of the weight, each the
// floats a linear of that block alone computes (the same GEMM call), bias and scale included.
TEST(LinearOp, OutputFeaturesGiveEachBlockAsItsOwnLinear) {
  const int64_t in = 40;
  const std::vector<int64_t> features = {48, 16, 16, 3};
  const int64_t out = 83;
  for (const int64_t tokens : {1, 2, 9}) {
    for (const bool bias : {false, true}) {
      for (const std::optional<float> scale : {std::optional<float>(), std::optional(0.25f)}) {
        SCOPED_TRACE(::testing::Message()
                     << "T=" << tokens << " bias " << bias << " scale " << scale.value_or(1.0f));
        const Tensor x = testing::random_tensor({tokens, in}, 11);
        const Tensor w = testing::random_tensor({out, in}, 12);
        const Tensor b = testing::random_tensor({out}, 13);
        std::vector<Tensor> inputs = {x, w};
        if (bias) inputs.push_back(b);
        const std::vector<Tensor> got =
            testing::run_cpu_op(split_linear_node(bias, scale, features), inputs, 3);
        ASSERT_EQ(got.size(), features.size());
        int64_t first = 0;
        for (size_t i = 0; i < features.size(); ++i) {
          const int64_t n = features[i];
          std::vector<Tensor> alone = {x, w.slice_rows(first, first + n)};
          if (bias) alone.push_back(b.slice_rows(first, first + n));
          const Tensor want = testing::run_cpu_op(linear_node(bias, scale), alone, 3)[0];
          ASSERT_EQ(got[i].shape(), (Shape{tokens, n}));
          EXPECT_EQ(std::vector<float>(got[i].data<float>(), got[i].data<float>() + tokens * n),
                    std::vector<float>(want.data<float>(), want.data<float>() + tokens * n))
              << "output " << i;
          first += n;
        }
      }
    }
  }
}

TEST(LinearOp, RejectsBadOutputFeatures) {
  const ValueType x{DType::kF32, {kTokens, 64}};
  const ValueType w{DType::kF32, {32, 64}};
  testing::expect_error(
      [&] {
        testing::infer_op(split_linear_node(false, {}, {32}), {x, w});
      },
      {"output_features must have 2 to 8 entries"});
  testing::expect_error(
      [&] {
        testing::infer_op(split_linear_node(false, {}, {16, 8}), {x, w});
      },
      {"output_features [16, 8] add up to 24, the weight has 32 rows"});
  testing::expect_error(
      [&] {
        testing::infer_op(split_linear_node(false, {}, {40, -8}), {x, w});
      },
      {"must each be in [1, 32]"});
  ValueType fp8{DType::kF8E4M3, {32, 64}};
  fp8.quant_group = GroupShape{128, 128};
  testing::expect_error(
      [&] {
        testing::infer_op(split_linear_node(false, {}, {16, 16}), {x, fp8});
      },
      {"output_features needs an unquantized weight"});
  const auto types = testing::infer_op(split_linear_node(false, {}, {16, 8, 8}), {x, w});
  ASSERT_EQ(types.size(), 3u);
  EXPECT_EQ(types[1], (ValueType{DType::kF32, {kTokens, 8}}));
}

}  // namespace
}  // namespace mg
