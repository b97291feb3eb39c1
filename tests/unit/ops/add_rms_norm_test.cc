// op add_rms_norm on the CPU: both outputs against add_reference + rms_norm_reference (fp64) on
// random inputs of odd and model sizes, 1..8 rows and many, with and without a weight; and the
// op's checks (whole rows only, same shapes).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "ops/nn/add_rms_norm/add_rms_norm.h"
#include "tests/testing/op_harness.h"
#include "tests/testing/test_util.h"

namespace mg {
namespace {

using ::testing::HasSubstr;

proto::Node add_rms_norm_node(bool has_weight, int64_t group_size = 0) {
  proto::Node node;
  node.set_name("add+norm");
  node.set_op("add_rms_norm");
  node.mutable_rms_norm()->set_eps(1e-5f);
  node.mutable_rms_norm()->set_has_weight(has_weight);
  node.mutable_rms_norm()->set_group_size(group_size);
  return node;
}

TEST(AddRmsNormOp, BothOutputsMatchTheReference) {
  struct Dims {
    int64_t rows, dim;
  };
  for (const Dims d : {Dims{1, 1}, Dims{1, 7}, Dims{3, 33}, Dims{8, 2048}, Dims{5, 4099},
                       Dims{2, 1024}, Dims{300, 131}, Dims{6, 1025}}) {
    for (const bool weight : {true, false}) {
      SCOPED_TRACE(::testing::Message() << d.rows << " x " << d.dim << " weight " << weight);
      const uint32_t seed = static_cast<uint32_t>(d.rows * 1000 + d.dim);
      const Tensor a = testing::random_tensor({d.rows, d.dim}, seed, -3.0f, 2.0f);
      const Tensor b = testing::random_tensor({d.rows, d.dim}, seed + 1, -1.0f, 1.0f);
      const Tensor w = testing::random_tensor({d.dim}, seed + 2, 0.5f, 1.5f);
      std::vector<Tensor> inputs = {a, b};
      if (weight) inputs.push_back(w);
      const std::vector<Tensor> out = testing::run_cpu_op(add_rms_norm_node(weight), inputs);
      ASSERT_EQ(out.size(), 2u);
      std::vector<float> sum(static_cast<size_t>(d.rows * d.dim)), y(sum.size());
      add_rms_norm_reference(a.data<float>(), b.data<float>(), 1.0f, d.rows, d.dim,
                             weight ? w.data<float>() : nullptr, 1e-5f, sum.data(), y.data());
      const auto span_of = [](const Tensor& t) {
        return std::span<const float>(t.data<float>(), static_cast<size_t>(t.numel()));
      };
      EXPECT_LE(testing::normalized_error(span_of(out[0]), sum), 1e-7);
      EXPECT_LE(testing::normalized_error(span_of(out[1]), y), 1e-6);
    }
  }
}

TEST(AddRmsNormOp, RefusesGroupsAndMismatchedShapes) {
  const Tensor a = testing::random_tensor({2, 8}, 1);
  try {
    testing::run_cpu_op(add_rms_norm_node(false, 4), {a, a});
    ADD_FAILURE() << "group_size 4 accepted";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("group_size must be 0"));
  }
  try {
    testing::run_cpu_op(add_rms_norm_node(false), {a, testing::random_tensor({2, 9}, 2)});
    ADD_FAILURE() << "mismatched shapes accepted";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("same shape"));
  }
}

}  // namespace
}  // namespace mg
