#include <gtest/gtest.h>

#include "ops/nn/embedding/embedding.h"
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

TEST(EmbeddingOp, MatchesReference) {
  struct Case {
    int64_t vocab, hidden;
    std::vector<int32_t> ids;
    std::optional<float> scale;
  };
  const std::vector<Case> cases = {
      {1, 1, {0}, std::nullopt},
      {37, 13, {36}, std::nullopt},
      {37, 13, {5, 0, 36, 5, 17}, 2.5f},
      {1000, 129, {999, 3, 3, 512, 0, 1, 77, 400, 401}, 0.125f},
  };
  uint32_t seed = 10;
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message()
                 << "V=" << c.vocab << " H=" << c.hidden << " T=" << c.ids.size());
    Tensor table = testing::random_tensor({c.vocab, c.hidden}, ++seed);
    Tensor ids = testing::i32_tensor(c.ids);
    std::vector<Tensor> out = testing::run_cpu_op(embedding_node(c.scale), {ids, table}, 3);
    ASSERT_EQ(out[0].shape(), (Shape{static_cast<int64_t>(c.ids.size()), c.hidden}));
    std::vector<float> ref(static_cast<size_t>(out[0].numel()));
    embedding_reference(c.ids.data(), static_cast<int64_t>(c.ids.size()), table.data<float>(),
                        c.vocab, c.hidden, c.scale.value_or(1.0f), ref.data());
    EXPECT_LT(testing::normalized_error(testing::span_of(out[0]), ref), 1e-7);
  }
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
