#include <gtest/gtest.h>

#include "ops/nn/embedding/embedding.h"
#include "tests/testing/op_case_check.h"
#include "tests/testing/op_harness.h"
#include "tests/testing/test_util.h"
#include "tests/unit/ops/nn_test_util.h"

namespace mg {
namespace {

proto::Node embedding_node(std::optional<float> scale) {
  proto::Node node;
  node.set_name("embed");
  node.set_op("embedding");
  auto* p = node.mutable_embedding();
  if (scale) p->set_scale(*scale);
  return node;
}

// Every embedding case of the shared table (tests/testing/op_cases.cc) against the reference.
TEST(EmbeddingOp, MatchesReference) {
  testing::expect_cpu_cases_match_reference("embedding");
}

TEST(EmbeddingOp, RowIsTheTableRowTimesScale) {
  // A hand-checkable case: row 2 of a 3x2 table, times 3.
  const float table_values[] = {1, 2, 3, 4, 5, 6};
  Tensor table = testing::tensor_from({3, 2}, table_values);
  std::vector<Tensor> out =
      testing::run_cpu_op(embedding_node(3.0f), {testing::i32_tensor({2, 0}), table});
  const std::vector<float> expected = {15, 18, 3, 6};
  EXPECT_EQ(testing::max_abs_diff(testing::span_of(out[0]), expected), 0.0);
}

TEST(EmbeddingOp, TokenIdOutOfRangeIsAnErrorNamingIdAndVocab) {
  Tensor table = testing::random_tensor({50, 8}, 1);
  testing::CompiledOp op(embedding_node(std::nullopt), {testing::i32_tensor({1}), table});
  testing::expect_error(
      [&] {
        op.run({testing::i32_tensor({3, 50, 4}), table});
      },
      {"token id 50", "V = 50"});
  testing::expect_error([&] { op.run({testing::i32_tensor({-7}), table}); }, {"token id -7"});
}

TEST(EmbeddingOp, RejectsBadInputTypes) {
  const proto::Node node = embedding_node(std::nullopt);
  testing::expect_error(
      [&] {
        testing::infer_op(node,
                          {ValueType{DType::kF32, {kTokens}}, ValueType{DType::kF32, {9, 4}}});
      },
      {"token_ids must be I32[T]"});
  testing::expect_error(
      [&] {
        testing::infer_op(node, {ValueType{DType::kI32, {kTokens}}, ValueType{DType::kF32, {9}}});
      },
      {"table must have shape [V, H]"});
  const auto types =
      testing::infer_op(node, {ValueType{DType::kI32, {kTokens}}, ValueType{DType::kBF16, {9, 4}}});
  EXPECT_EQ(types[0], (ValueType{DType::kF32, {kTokens, 4}}));
}

}  // namespace
}  // namespace mg
