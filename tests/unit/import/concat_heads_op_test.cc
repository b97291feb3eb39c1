// op "concat_heads" against its reference: per-head b (m = n) and one shared b head (m = 1).
#include <gtest/gtest.h>

#include "ops/nn/concat_heads/concat_heads.h"
#include "tests/testing/op_case_check.h"
#include "tests/testing/op_harness.h"
#include "tests/testing/test_util.h"
#include "tests/unit/ops/nn_test_util.h"

namespace mg {
namespace {

proto::Node concat_node(int64_t heads, int64_t a_dim, int64_t b_dim) {
  proto::Node node;
  node.set_name("concat0");
  node.set_op("concat_heads");
  node.mutable_concat_heads()->set_num_heads(heads);
  node.mutable_concat_heads()->set_a_head_dim(a_dim);
  node.mutable_concat_heads()->set_b_head_dim(b_dim);
  return node;
}

TEST(ConcatHeadsOp, HandCheckedSharedHead) {
  // One token, 2 heads of a (dim 2), one shared b head (dim 1).
  const auto out = testing::run_cpu_op(
      concat_node(2, 2, 1), {testing::tensor_from({1, 4}, std::vector<float>{1, 2, 3, 4}),
                             testing::tensor_from({1, 1}, std::vector<float>{9})});
  const std::vector<float> expected = {1, 2, 9, 3, 4, 9};
  EXPECT_EQ(testing::max_abs_diff(testing::span_of(out[0]), expected), 0.0);
}

// Every concat_heads case of the shared table (tests/testing/op_cases.cc), equal to the
// reference: per-head b (m = n) and one shared b head (m = 1), odd widths.
TEST(ConcatHeadsOp, MatchesReference) {
  testing::expect_cpu_cases_match_reference("concat_heads");
}

TEST(ConcatHeadsOp, RejectsBadShapes) {
  const ValueType a{DType::kF32, {kTokens, 64}};
  testing::expect_error(
      [&] {
        testing::infer_op(concat_node(4, 16, 8), {a, ValueType{DType::kF32, {kTokens, 16}}});
      },
      {"concat_heads: b must have b_head_dim = 8 features", "or num_heads * b_head_dim = 32"});
  testing::expect_error(
      [&] {
        testing::infer_op(concat_node(4, 8, 8), {a, ValueType{DType::kF32, {kTokens, 8}}});
      },
      {"concat_heads: a must have num_heads * a_head_dim = 4 * 8 = 32 features"});
  testing::expect_error(
      [&] {
        testing::infer_op(concat_node(0, 8, 8), {a, a});
      },
      {"must be positive"});
}

}  // namespace
}  // namespace mg
