#include <gtest/gtest.h>

#include <cmath>

#include "ops/nn/rms_norm/rms_norm.h"
#include "tests/testing/op_case_check.h"
#include "tests/testing/op_harness.h"
#include "tests/testing/test_util.h"
#include "tests/unit/ops/nn_test_util.h"

namespace mg {
namespace {

proto::Node rms_norm_node(int64_t group_size, bool has_weight, float eps = 1e-5f) {
  proto::Node node;
  node.set_name("norm");
  node.set_op("rms_norm");
  auto* p = node.mutable_rms_norm();
  p->set_eps(eps);
  p->set_group_size(group_size);
  p->set_has_weight(has_weight);
  return node;
}

// Every rms_norm case of the shared table (tests/testing/op_cases.cc): groups, weightless.
TEST(RmsNormOp, MatchesReference) {
  testing::expect_cpu_cases_match_reference("rms_norm");
}

TEST(RmsNormOp, HandComputedRow) {
  // x = [3, 4]: mean(x²) = 12.5, eps 0.5 -> rsqrt(13) ; w = [1, 2].
  const float xv[] = {3, 4};
  const float wv[] = {1, 2};
  std::vector<Tensor> out =
      testing::run_cpu_op(rms_norm_node(0, true, 0.5f),
                          {testing::tensor_from({1, 2}, xv), testing::tensor_from({2}, wv)});
  const double r = 1.0 / std::sqrt(13.0);
  EXPECT_NEAR(out[0].data<float>()[0], 3 * r, 1e-6);
  EXPECT_NEAR(out[0].data<float>()[1], 8 * r, 1e-6);
}

TEST(RmsNormOp, WeightlessPerHeadNormHasUnitRms) {
  // Llama-4 qk-norm: weightless, per head of 8; every head comes out with mean(y²) ≈ 1.
  Tensor x = testing::random_tensor({3, 32}, 7, -4.0f, 4.0f);
  std::vector<Tensor> out = testing::run_cpu_op(rms_norm_node(8, false, 1e-9f), {x});
  const float* y = out[0].data<float>();
  for (int64_t head = 0; head < 12; ++head) {
    double sum = 0;
    for (int i = 0; i < 8; ++i) sum += y[head * 8 + i] * y[head * 8 + i];
    EXPECT_NEAR(sum / 8, 1.0, 1e-5);
  }
}

TEST(RmsNormOp, RejectsBadParams) {
  const ValueType x{DType::kF32, {kTokens, 64}};
  const ValueType w16{DType::kF32, {16}};
  testing::expect_error(
      [&] {
        testing::infer_op(rms_norm_node(24, true), {x, ValueType{DType::kF32, {24}}});
      },
      {"not divisible by group_size 24"});
  testing::expect_error([&] { testing::infer_op(rms_norm_node(-1, false), {x}); },
                        {"group_size -1"});
  testing::expect_error(
      [&] {
        testing::infer_op(rms_norm_node(16, false), {x, w16});
      },
      {"weight", "present", "has_weight is false"});
  testing::expect_error([&] { testing::infer_op(rms_norm_node(16, true), {x}); },
                        {"weight", "absent", "has_weight is true"});
  testing::expect_error(
      [&] {
        testing::infer_op(rms_norm_node(0, true), {x, w16});
      },
      {"weight must have shape [64]"});
  testing::expect_error([&] { testing::infer_op(rms_norm_node(0, false, 0.0f), {x}); }, {"eps"});
  testing::expect_error(
      [&] {
        testing::infer_op(rms_norm_node(0, false), {ValueType{DType::kF32, {4, 64}}});
      },
      {"leading token dimension"});
}

}  // namespace
}  // namespace mg
