#include <cmath>
#include <limits>

#include <gtest/gtest.h>

#include "ops/nn/add/add.h"
#include "tests/testing/op_case_check.h"
#include "tests/testing/op_harness.h"
#include "tests/testing/test_util.h"
#include "tests/unit/moe/moe_test_util.h"

namespace mg {
namespace {

// Every add case of the shared table (tests/testing/op_cases.cc) against add_reference.
TEST(AddOp, MatchesReferenceWithScale) {
  testing::expect_cpu_cases_match_reference("add");
}

TEST(AddOp, RejectsShapeMismatch) {
  proto::Node node;
  node.set_op("add");
  node.mutable_add();
  EXPECT_THROW(testing::infer_op(node, {ValueType{DType::kF32, {kTokens, 4}},
                                        ValueType{DType::kF32, {kTokens, 5}}}),
               Error);
}

// Every other op refuses NaN params; add used to accept `scale: nan` and turn every output into
// NaN, which the model then "sampled" as token 0 with exit 0.
TEST(AddOp, RejectsANonFiniteScale) {
  for (float bad : {std::nanf(""), std::numeric_limits<float>::infinity()}) {
    proto::Node node;
    node.set_op("add");
    node.mutable_add()->set_scale(bad);
    EXPECT_MG_ERROR(testing::infer_op(node, {ValueType{DType::kF32, {kTokens, 4}},
                                             ValueType{DType::kF32, {kTokens, 4}}}),
                    "add: scale must be finite");
  }
}

}  // namespace
}  // namespace mg
