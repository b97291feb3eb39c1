#include <gtest/gtest.h>

#include <cmath>

#include "ops/nn/activation.h"
#include "ops/nn/gated_mlp/gated_mlp.h"
#include "tests/testing/op_case_check.h"
#include "tests/testing/op_harness.h"
#include "tests/testing/test_util.h"
#include "tests/unit/ops/nn_test_util.h"

namespace mg {
namespace {

proto::Node gated_mlp_node(proto::Activation activation) {
  proto::Node node;
  node.set_name("mlp");
  node.set_op("gated_mlp");
  node.mutable_gated_mlp()->set_activation(activation);
  return node;
}

// Every gated_mlp case of the shared table (tests/testing/op_cases.cc): three activations.
TEST(GatedMlpOp, MatchesReference) {
  testing::expect_cpu_cases_match_reference("gated_mlp");
}

TEST(GatedMlpOp, RejectsUnsupportedActivationByName) {
  const std::vector<std::optional<ValueType>> types = {
      ValueType{DType::kF32, {kTokens, 8}}, ValueType{DType::kF32, {4, 8}},
      ValueType{DType::kF32, {4, 8}}, ValueType{DType::kF32, {8, 4}}};
  EXPECT_EQ(testing::infer_op(gated_mlp_node(proto::SILU_GATED), types)[0],
            (ValueType{DType::kF32, {kTokens, 8}}));
  testing::expect_error([&] { testing::infer_op(gated_mlp_node(proto::SWIGLU_OAI), types); },
                        {"activation SWIGLU_OAI is not supported"});
  testing::expect_error(
      [&] { testing::infer_op(gated_mlp_node(proto::ACTIVATION_UNSPECIFIED), types); },
      {"ACTIVATION_UNSPECIFIED"});
  testing::expect_error(
      [&] { testing::infer_op(gated_mlp_node(static_cast<proto::Activation>(42)), types); },
      {"activation 42"});
}

TEST(GatedMlpOp, RejectsBadShapes) {
  const proto::Node node = gated_mlp_node(proto::GELU_GATED);
  const ValueType x{DType::kF32, {kTokens, 8}};
  testing::expect_error(
      [&] {
        testing::infer_op(node, {x, ValueType{DType::kF32, {4, 7}}, ValueType{DType::kF32, {4, 8}},
                                 ValueType{DType::kF32, {8, 4}}});
      },
      {"gate must have shape [I, H] = [*, 8], got F32[4, 7]"});
  testing::expect_error(
      [&] {
        testing::infer_op(node, {x, ValueType{DType::kF32, {4, 8}}, ValueType{DType::kF32, {5, 8}},
                                 ValueType{DType::kF32, {8, 4}}});
      },
      {"up", "[4, 8]"});
  testing::expect_error(
      [&] {
        testing::infer_op(node, {x, ValueType{DType::kF32, {4, 8}}, ValueType{DType::kF32, {4, 8}},
                                 ValueType{DType::kF32, {4, 8}}});
      },
      {"down", "[8, 4]"});
}

TEST(Activation, HandValues) {
  EXPECT_NEAR(silu(1.0f), 1.0 / (1.0 + std::exp(-1.0)), 1e-7);  // 0.7310586
  EXPECT_NEAR(silu(-2.0f), -2.0 / (1.0 + std::exp(2.0)), 1e-7);
  EXPECT_EQ(silu(-200.0f), -0.0f);  // no overflow to NaN
  EXPECT_NEAR(gelu_erf(1.0f), 0.8413447460685429, 1e-7);
  EXPECT_NEAR(gelu_erf(-0.5f), -0.15426876936299344, 1e-7);
  EXPECT_NEAR(gelu_tanh(1.0f), 0.8411919906082768, 1e-7);
  EXPECT_NEAR(gelu_tanh(-0.5f), -0.15428599017485606, 1e-7);
  // GPT-OSS: gate clamped to 7 from above only, up to [-7, 7].
  EXPECT_NEAR(swiglu_oai(1.0f, 2.0f, 1.702f, 7.0f), 3.0 / (1.0 + std::exp(-1.702)), 1e-6);
  EXPECT_NEAR(swiglu_oai(9.0f, 8.0f, 1.702f, 7.0f), 8.0 * 7.0 / (1.0 + std::exp(-1.702 * 7)), 1e-5);
  EXPECT_NEAR(swiglu_oai(-9.0f, -8.0f, 1.702f, 7.0f), -6.0 * -9.0 / (1.0 + std::exp(1.702 * 9)),
              1e-7);
}

}  // namespace
}  // namespace mg
