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

}  // namespace
}  // namespace mg
