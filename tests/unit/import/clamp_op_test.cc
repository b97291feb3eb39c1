// op "clamp" against its reference: both bounds, one bound, NaN passing through.
#include <cmath>
#include <limits>

#include <gtest/gtest.h>

#include "ops/nn/clamp/clamp.h"
#include "tests/testing/op_case_check.h"
#include "tests/testing/op_harness.h"
#include "tests/testing/test_util.h"
#include "tests/unit/ops/nn_test_util.h"

namespace mg {
namespace {

proto::Node clamp_node(std::optional<float> min, std::optional<float> max) {
  proto::Node node;
  node.set_name("clamp0");
  node.set_op("clamp");
  proto::ClampParams* p = node.mutable_clamp();
  if (min) p->set_min(*min);
  if (max) p->set_max(*max);
  return node;
}

// Every clamp case of the shared table (tests/testing/op_cases.cc), equal to the reference:
// both, one and no bounds over inputs holding NaN, ±inf, -0 and far values.
TEST(ClampOp, MatchesReference) {
  testing::expect_cpu_cases_match_reference("clamp");
}

TEST(ClampOp, HandCheckedAndNaN) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const auto out =
      testing::run_cpu_op(clamp_node(-1.0f, 1.0f),
                          {testing::tensor_from({1, 4}, std::vector<float>{-3, 0.5f, 2, nan})});
  const float* y = out[0].data<float>();
  EXPECT_EQ(y[0], -1.0f);
  EXPECT_EQ(y[1], 0.5f);
  EXPECT_EQ(y[2], 1.0f);
  EXPECT_TRUE(std::isnan(y[3]));
}

TEST(ClampOp, RejectsBadBounds) {
  const ValueType x{DType::kF32, {kTokens, 4}};
  testing::expect_error([&] { testing::infer_op(clamp_node(1.0f, -1.0f), {x}); },
                        {"clamp: min 1 must not exceed max -1"});
  testing::expect_error(
      [&] { testing::infer_op(clamp_node(std::numeric_limits<float>::quiet_NaN(), 1.0f), {x}); },
      {"clamp: min must not be NaN"});
}

}  // namespace
}  // namespace mg
