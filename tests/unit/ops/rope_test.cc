#include <gtest/gtest.h>

#include <cmath>

#include "ops/nn/rope/rope.h"
#include "tests/testing/op_case_check.h"
#include "tests/testing/op_cases.h"
#include "tests/testing/op_harness.h"
#include "tests/testing/test_util.h"
#include "tests/unit/ops/nn_test_util.h"

namespace mg {
namespace {

proto::RopeParams rope_params(int64_t heads, int64_t head_dim, proto::RopePairing pairing,
                              double theta = 10000.0) {
  proto::RopeParams p;
  p.set_num_heads(heads);
  p.set_head_dim(head_dim);
  p.set_pairing(pairing);
  p.set_theta(theta);
  return p;
}

proto::RopeParams gpt_oss_yarn() {
  proto::RopeParams p = rope_params(2, 64, proto::HALF_SPLIT, 150000.0);
  auto* s = p.mutable_scaling();
  s->set_type(proto::RopeScaling::YARN);
  s->set_factor(32.0);
  s->set_original_max_position(4096);
  s->set_beta_fast(32.0);
  s->set_beta_slow(1.0);
  s->set_truncate(false);
  return p;
}

// DeepSeek-V3-like: truncate (default), beta defaults, mscale == mscale_all_dim.
proto::RopeParams deepseek_yarn() {
  proto::RopeParams p = rope_params(3, 96, proto::INTERLEAVED, 10000.0);
  p.set_rotary_offset(32);
  p.set_rotary_dim(64);
  auto* s = p.mutable_scaling();
  s->set_type(proto::RopeScaling::YARN);
  s->set_factor(40.0);
  s->set_original_max_position(4096);
  s->set_mscale(1.0);
  s->set_mscale_all_dim(1.0);
  return p;
}

// Llama 3.1: theta 500000, d 128, s 8, low 1, high 4, L0 8192.
proto::RopeParams llama31() {
  proto::RopeParams p = rope_params(2, 128, proto::INTERLEAVED, 500000.0);
  auto* s = p.mutable_scaling();
  s->set_type(proto::RopeScaling::LLAMA3);
  s->set_factor(8.0);
  s->set_original_max_position(8192);
  s->set_low_freq_factor(1.0);
  s->set_high_freq_factor(4.0);
  return p;
}

proto::Node rope_node(const proto::RopeParams& p) {
  proto::Node node;
  node.set_name("rope");
  node.set_op("rope");
  *node.mutable_rope() = p;
  return node;
}

// Every rope case of the shared table (tests/testing/op_cases.cc): each configuration of
// rope_configs() at 1, 7 and 40 tokens (two at 300) on decode-like, prefill-like and far positions.
TEST(RopeOp, MatchesReferenceForEveryPairingAndScaling) {
  testing::expect_cpu_cases_match_reference("rope");
}

TEST(RopeOp, KernelFrequenciesMatchReferenceFrequencies) {
  for (const testing::RopeConfig& config : testing::rope_configs()) {
    SCOPED_TRACE(config.name);
    const proto::RopeParams& p = config.params;
    const std::vector<double> kernel = rope_inv_freq(p);
    const std::vector<double> ref = rope_reference_inv_freq(p);
    ASSERT_EQ(kernel.size(), static_cast<size_t>(rope_rotary_dim(p) / 2));
    ASSERT_EQ(kernel.size(), ref.size());
    for (size_t i = 0; i < ref.size(); ++i) EXPECT_NEAR(kernel[i] / ref[i], 1.0, 1e-12) << i;
    EXPECT_NEAR(rope_attention_factor(p), rope_reference_attention_factor(p), 1e-15);
  }
}

TEST(RopeOp, YarnGptOssHandValues) {
  // θ 150000, d 64, s 32, L0 4096, β 32/1, no truncation:
  //   lo = 64 ln(4096 / (2π·32)) / (2 ln 150000) = 8.09278,  hi = 64 ln(4096 / 2π) / (2 ln 150000)
  //      = 17.39802; i <= 8 keeps θ^(-2i/64), i >= 18 is divided by 32, in between mixes.
  const proto::RopeParams p = gpt_oss_yarn();
  const std::vector<double> f = rope_inv_freq(p);
  EXPECT_DOUBLE_EQ(f[0], 1.0);
  EXPECT_NEAR(f[5], std::pow(150000.0, -10.0 / 64), 1e-15);        // 0.155323
  EXPECT_NEAR(f[8], 0.050813274815461475, 1e-15);                  // ramp 0: unscaled
  EXPECT_NEAR(f[9], 0.03170569618466377, 1e-15);                   // ramp 0.0975
  EXPECT_NEAR(f[12], 0.006794959489732219, 1e-15);                 // ramp 0.4199
  EXPECT_NEAR(f[17], 0.0001293187012450632, 1e-15);                // ramp 0.9694
  EXPECT_NEAR(f[18], std::pow(150000.0, -36.0 / 64) / 32, 1e-18);  // ramp 1
  EXPECT_NEAR(f[31], 3.0235114281192144e-07, 1e-20);
  // attention_factor = 0.1 ln 32 + 1.
  EXPECT_NEAR(rope_attention_factor(p), 1.3465735902799727, 1e-15);
}

TEST(RopeOp, YarnDeepSeekHandValues) {
  // θ 10000, d 64, s 40, L0 4096, truncate: lo = floor(9.42) = 10, hi = ceil(22.26) = 23.
  proto::RopeParams p = deepseek_yarn();
  const std::vector<double> f = rope_inv_freq(p);
  EXPECT_NEAR(f[10], std::pow(10000.0, -20.0 / 64), 1e-15);  // ramp 0
  EXPECT_NEAR(f[11], 0.03900692656714386, 1e-15);            // ramp 1/13
  EXPECT_NEAR(f[15], 0.008334508951020777, 1e-15);           // ramp 5/13
  EXPECT_NEAR(f[22], 0.0001778279410038922, 1e-16);          // ramp 12/13
  EXPECT_NEAR(f[23], std::pow(10000.0, -46.0 / 64) / 40, 1e-18);
  // mscale == mscale_all_dim: factor 1. DeepSeek-V2 (mscale 0.707 vs 1): ratio of get_mscale.
  EXPECT_DOUBLE_EQ(rope_attention_factor(p), 1.0);
  p.mutable_scaling()->set_mscale(1.0);
  p.mutable_scaling()->set_mscale_all_dim(0.707);
  EXPECT_NEAR(rope_attention_factor(p), (0.1 * std::log(40.0) + 1) / (0.0707 * std::log(40.0) + 1),
              1e-15);
  EXPECT_NEAR(rope_attention_factor(p), 1.0857263992561355, 1e-15);
  // Neither given: get_mscale(s, 1).
  p.mutable_scaling()->set_mscale(0.0);
  EXPECT_NEAR(rope_attention_factor(p), 0.1 * std::log(40.0) + 1, 1e-15);
}

TEST(RopeOp, Llama3HandValues) {
  // Wavelengths below 8192/4 = 2048 are kept, above 8192 divided by 8, in between smoothed.
  const std::vector<double> f = rope_inv_freq(llama31());
  const auto base = [](int i) { return std::pow(500000.0, -2.0 * i / 128); };
  EXPECT_DOUBLE_EQ(f[0], 1.0);
  EXPECT_NEAR(f[20], base(20), 1e-17);               // wavelen 379: kept
  EXPECT_NEAR(f[29], 0.002166570763503359, 1e-17);   // wavelen 2400: smoothed
  EXPECT_NEAR(f[32], 0.0005248461609929547, 1e-17);  // wavelen 4443: smoothed
  EXPECT_NEAR(f[35], base(35) / 8, 1e-18);           // wavelen 8219: divided
  EXPECT_NEAR(f[63], 3.068925988914511e-07, 1e-20);
  EXPECT_DOUBLE_EQ(rope_attention_factor(llama31()), 1.0);
}

TEST(RopeOp, HandComputedRotation) {
  // head_dim 4, θ 100: inv_freq = [1, 0.1]; position 1 rotates pair 0 by 1 rad, pair 1 by 0.1.
  const float xv[] = {1, 2, 3, 4};
  Tensor x = testing::tensor_from({1, 4}, xv);
  const double c0 = std::cos(1.0), s0 = std::sin(1.0), c1 = std::cos(0.1), s1 = std::sin(0.1);
  {
    std::vector<Tensor> out = testing::run_cpu_op(
        rope_node(rope_params(1, 4, proto::HALF_SPLIT, 100.0)), {x, testing::i32_tensor({1})});
    const float* y = out[0].data<float>();  // pairs (0, 2) and (1, 3)
    EXPECT_NEAR(y[0], 1 * c0 - 3 * s0, 1e-6);
    EXPECT_NEAR(y[2], 3 * c0 + 1 * s0, 1e-6);
    EXPECT_NEAR(y[1], 2 * c1 - 4 * s1, 1e-6);
    EXPECT_NEAR(y[3], 4 * c1 + 2 * s1, 1e-6);
  }
  {
    std::vector<Tensor> out = testing::run_cpu_op(
        rope_node(rope_params(1, 4, proto::INTERLEAVED, 100.0)), {x, testing::i32_tensor({1})});
    const float* y = out[0].data<float>();  // pairs (0, 1) and (2, 3)
    EXPECT_NEAR(y[0], 1 * c0 - 2 * s0, 1e-6);
    EXPECT_NEAR(y[1], 2 * c0 + 1 * s0, 1e-6);
    EXPECT_NEAR(y[2], 3 * c1 - 4 * s1, 1e-6);
    EXPECT_NEAR(y[3], 4 * c1 + 3 * s1, 1e-6);
  }
}

TEST(RopeOp, RejectsBadParams) {
  const ValueType x{DType::kF32, {kTokens, 64}};
  const ValueType pos{DType::kI32, {kTokens}};
  auto infer = [&](const proto::RopeParams& p, ValueType xt = {DType::kF32, {kTokens, 64}},
                   ValueType pt = {DType::kI32, {kTokens}}) {
    testing::infer_op(rope_node(p), {xt, pt});
  };
  proto::RopeParams p = rope_params(4, 16, proto::HALF_SPLIT);
  infer(p);  // valid

  proto::RopeParams odd = p;
  odd.set_rotary_dim(7);
  testing::expect_error([&] { infer(odd); }, {"rope: rotary_dim 7 must be even"});
  proto::RopeParams too_long = p;
  too_long.set_rotary_offset(4);
  testing::expect_error([&] { infer(too_long); },
                        {"rotary_dim 16", "exceeds head_dim 16 - rotary_offset 4 = 12"});
  proto::RopeParams no_pairing = p;
  no_pairing.set_pairing(proto::ROPE_PAIRING_UNSPECIFIED);
  testing::expect_error([&] { infer(no_pairing); }, {"ROPE_PAIRING_UNSPECIFIED"});
  proto::RopeParams no_theta = p;
  no_theta.set_theta(0);
  testing::expect_error([&] { infer(no_theta); }, {"theta must be positive"});
  proto::RopeParams yarn_no_l0 = gpt_oss_yarn();
  yarn_no_l0.set_num_heads(1);
  yarn_no_l0.mutable_scaling()->set_original_max_position(0);
  testing::expect_error([&] { infer(yarn_no_l0); }, {"original_max_position"});
  proto::RopeParams linear_no_factor = p;
  linear_no_factor.mutable_scaling()->set_type(proto::RopeScaling::LINEAR);
  testing::expect_error([&] { infer(linear_no_factor); }, {"scaling.factor must be positive"});
  proto::RopeParams llama_inverted = llama31();
  llama_inverted.set_num_heads(1);
  llama_inverted.set_head_dim(64);
  llama_inverted.mutable_scaling()->set_high_freq_factor(0.5);
  testing::expect_error([&] { infer(llama_inverted); },
                        {"high_freq_factor 0.5 must be >= low_freq_factor 1"});
  proto::RopeParams unknown = p;
  unknown.mutable_scaling()->set_type(static_cast<proto::RopeScaling::Type>(9));
  testing::expect_error([&] { infer(unknown); }, {"unknown scaling type 9"});

  testing::expect_error([&] { infer(rope_params(3, 16, proto::HALF_SPLIT)); },
                        {"num_heads * head_dim = 3 * 16 = 48", "F32[T, 64]"});
  testing::expect_error(
      [&] {
        infer(p, x, ValueType{DType::kI64, {kTokens}});
      },
      {"positions must be I32[T]"});
}

TEST(RopeOp, NegativePositionIsAnError) {
  const proto::RopeParams p = rope_params(2, 8, proto::HALF_SPLIT);
  Tensor x = testing::random_tensor({2, 16}, 5);
  testing::expect_error(
      [&] {
        testing::run_cpu_op(rope_node(p), {x, testing::i32_tensor({0, -3})});
      },
      {"position -3 (row 1) is negative"});
}

}  // namespace
}  // namespace mg
