#include <cmath>
#include <limits>

#include <gtest/gtest.h>

#include "ops/nn/add/add.h"
#include "tests/testing/op_harness.h"
#include "tests/testing/test_util.h"
#include "tests/unit/moe/moe_test_util.h"

namespace mg {
namespace {

TEST(AddOp, MatchesReferenceWithScale) {
  proto::Node node;
  node.set_name("add0");
  node.set_op("add");
  node.mutable_add()->set_scale(0.5f);
  Tensor a = testing::random_tensor({7, 33}, 1);
  Tensor b = testing::random_tensor({7, 33}, 2);
  std::vector<Tensor> out = testing::run_cpu_op(node, {a, b});
  ASSERT_EQ(out.size(), 1u);
  std::vector<float> ref(static_cast<size_t>(a.numel()));
  add_reference(a.data<float>(), b.data<float>(), 0.5f, ref.data(), a.numel());
  EXPECT_LT(testing::normalized_error(testing::span_of(out[0]), ref), 1e-7);
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
