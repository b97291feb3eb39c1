// op "attn_temperature" (Llama-4 NoPE query scaling) against its reference and hand values.
#include <cmath>

#include <gtest/gtest.h>

#include "ops/nn/attn_temperature/attn_temperature.h"
#include "tests/testing/op_case_check.h"
#include "tests/testing/op_harness.h"
#include "tests/testing/test_util.h"
#include "tests/unit/ops/nn_test_util.h"

namespace mg {
namespace {

proto::Node temperature_node(float attn_scale, float floor_scale) {
  proto::Node node;
  node.set_name("temp0");
  node.set_op("attn_temperature");
  node.mutable_attn_temperature()->set_attn_scale(attn_scale);
  node.mutable_attn_temperature()->set_floor_scale(floor_scale);
  return node;
}

TEST(AttnTemperatureOp, HandChecked) {
  // floor_scale 4: positions 0..2 -> factor 1; 3..6 -> 1 + 0.1 ln 2; 7 -> 1 + 0.1 ln 3.
  const auto out = testing::run_cpu_op(
      temperature_node(0.1f, 4.0f), {testing::tensor_from({4, 1}, std::vector<float>{1, 1, 1, 1}),
                                     testing::i32_tensor({0, 2, 3, 7})});
  const float* y = out[0].data<float>();
  EXPECT_FLOAT_EQ(y[0], 1.0f);
  EXPECT_FLOAT_EQ(y[1], 1.0f);
  EXPECT_FLOAT_EQ(y[2], static_cast<float>(1.0 + 0.1 * std::log(2.0)));
  EXPECT_FLOAT_EQ(y[3], static_cast<float>(1.0 + 0.1 * std::log(3.0)));
}

// Every attn_temperature case of the shared table (tests/testing/op_cases.cc): positions up
// to 2^31 - 1, fractional and unit floor_scale.
TEST(AttnTemperatureOp, MatchesReference) {
  testing::expect_cpu_cases_match_reference("attn_temperature");
}

TEST(AttnTemperatureOp, RejectsBadParams) {
  const ValueType x{DType::kF32, {kTokens, 4}};
  const ValueType pos{DType::kI32, {kTokens}};
  testing::expect_error(
      [&] {
        testing::infer_op(temperature_node(0.1f, 0.0f), {x, pos});
      },
      {"attn_temperature: floor_scale must be positive"});
  testing::expect_error(
      [&] {
        testing::infer_op(temperature_node(0.1f, 4.0f), {x, ValueType{DType::kF32, {kTokens}}});
      },
      {"attn_temperature: positions must be I32[T]"});
}

}  // namespace
}  // namespace mg
