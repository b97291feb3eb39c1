#include "ops/moe/config.h"

#include <sstream>

#include <gtest/gtest.h>

#include "ops/moe/moe_params.h"
#include "tests/unit/moe/moe_test_util.h"

namespace mg {
namespace {

RoutingConfig softmax_routing(int64_t experts, int64_t k) {
  RoutingConfig r;
  r.method = RoutingMethod::kSoftmaxTopK;
  r.num_experts = experts;
  r.top_k = k;
  return r;
}

MoEConfig::Fields basic_fields() {
  MoEConfig::Fields f;
  f.routing = softmax_routing(8, 2);
  f.hidden_size = 16;
  f.intermediate_size = 12;
  return f;
}

TEST(MoEConfig, ValidConfigPrintsAndCompares) {
  MoEConfig::Fields f = basic_fields();
  f.routing.renormalize = true;
  f.shared.intermediate_size = 24;
  MoEConfig a(f);
  EXPECT_EQ(a.num_experts(), 8);
  EXPECT_EQ(a.top_k(), 2);
  EXPECT_EQ(a.w13_rows(), 24);
  EXPECT_EQ(a.str(),
            "H=16 I=12 act=silu_gated routing=softmax_topk(E=8, k=2, renorm) quant=unquantized "
            "shared(I=24, silu_gated)");
  std::ostringstream os;
  os << a;
  EXPECT_EQ(os.str(), a.str());
  EXPECT_EQ(a, MoEConfig(f));
  f.routing.renormalize = false;
  EXPECT_NE(a, MoEConfig(f));
}

TEST(MoEConfig, NonGatedActivationHasIRowsInW13) {
  MoEConfig::Fields f = basic_fields();
  f.activation.kind = MoEActivation::kReluSquared;
  EXPECT_EQ(MoEConfig(f).w13_rows(), 12);
}

TEST(MoEConfig, RejectsBadRouting) {
  MoEConfig::Fields f = basic_fields();
  f.routing.top_k = 9;
  EXPECT_MG_ERROR(MoEConfig{f}, "top_k must be in [1, num_experts = 8], got 9");

  f = basic_fields();
  f.routing.method = RoutingMethod::kGroupedTopK;
  f.routing.num_groups = 3;
  EXPECT_MG_ERROR(MoEConfig{f}, "num_experts (8) must be divisible by num_groups (3)");
  f.routing.num_groups = 4;
  f.routing.groups_kept = 5;
  EXPECT_MG_ERROR(MoEConfig{f}, "groups_kept must be in [1, num_groups = 4], got 5");
  f.routing.groups_kept = 1;
  f.routing.top_k = 3;
  EXPECT_MG_ERROR(MoEConfig{f}, "hold fewer than top_k = 3");
  f.routing.top_k = 2;
  f.routing.num_groups = 8;
  f.routing.groups_kept = 2;
  f.routing.group_score = GroupScore::kSumTop2;
  EXPECT_MG_ERROR(MoEConfig{f}, "sum_top2 needs at least 2 experts per group");

  f = basic_fields();
  f.routing.method = RoutingMethod::kTopKSoftmax;
  f.routing.has_score_correction_bias = true;
  EXPECT_MG_ERROR(MoEConfig{f}, "topk_softmax selects on raw logits and takes no score-correction");

  f = basic_fields();
  f.routing.method = RoutingMethod::kLlama4Top1Sigmoid;
  EXPECT_MG_ERROR(MoEConfig{f}, "needs top_k = 1, got 2");
  f.routing.top_k = 1;
  f.routing.routed_scaling_factor = 2.0f;
  EXPECT_MG_ERROR(MoEConfig{f}, "takes no routed_scaling_factor");

  f = basic_fields();
  f.routing.num_groups = 2;
  EXPECT_MG_ERROR(MoEConfig{f}, "only used by grouped_topk");
  f = basic_fields();
  f.routing.routed_scaling_factor = std::numeric_limits<float>::quiet_NaN();
  EXPECT_MG_ERROR(MoEConfig{f}, "routed_scaling_factor must be finite");
}

TEST(MoEConfig, RejectsBadShapesAndFlags) {
  MoEConfig::Fields f = basic_fields();
  f.hidden_size = 0;
  EXPECT_MG_ERROR(MoEConfig{f}, "hidden_size must be >= 1");
  f = basic_fields();
  f.activation.kind = MoEActivation::kGelu;
  f.gate_up_interleaved = true;
  EXPECT_MG_ERROR(MoEConfig{f}, "gate_up_interleaved needs a gated activation");
  f = basic_fields();
  f.shared.has_gate = true;
  EXPECT_MG_ERROR(MoEConfig{f}, "shared expert gate needs shared experts");
  f = basic_fields();
  f.activation.kind = MoEActivation::kSwigluOai;
  f.activation.swiglu_limit = -1;
  EXPECT_MG_ERROR(MoEConfig{f}, "swiglu_limit must be finite and > 0");
}

TEST(MoEQuantConfig, KeysAreValidatedPrintedAndCompared) {
  const MoEQuantConfig u = MoEQuantConfig::unquantized();
  EXPECT_EQ(u.scheme(), QuantScheme::kUnquantized);
  EXPECT_FALSE(u.weight_key().quantized());
  EXPECT_EQ(u.str(), "unquantized(weight F32, activation F32)");
  EXPECT_EQ(u, MoEQuantConfig::unquantized(DType::kF32));
  EXPECT_NE(u, MoEQuantConfig::unquantized(DType::kBF16));

  const QuantKey fp8_block(DType::kF8E4M3, DType::kF32, {128, 128}, true);
  EXPECT_EQ(fp8_block.str(), "F8_E4M3(scale F32 per [128, 128], static)");
  const QuantKey fp8_token(DType::kF8E4M3, DType::kF32, GroupShape::per_token(), false);
  const MoEQuantConfig q(QuantScheme::kFp8Block, fp8_block, fp8_token);
  EXPECT_EQ(q.weight_key(), fp8_block);
  std::ostringstream os;
  os << q;
  EXPECT_EQ(os.str(), q.str());

  EXPECT_MG_ERROR(QuantKey(DType::kF32, DType::kF32, GroupShape::per_tensor(), true),
                  "needs an 8-bit");
  EXPECT_MG_ERROR(QuantKey::unquantized(DType::kI8), "16- or 32-bit floating dtype");
  EXPECT_MG_ERROR(QuantKey(DType::kU8, DType::kU8, {1, 0}, true), "must be -1 (whole) or >= 1");
  EXPECT_MG_ERROR(MoEQuantConfig(QuantScheme::kUnquantized, fp8_block, fp8_token),
                  "unquantized takes unquantized keys");
  EXPECT_MG_ERROR(
      MoEQuantConfig(QuantScheme::kFp8PerTensor, QuantKey::unquantized(), QuantKey::unquantized()),
      "fp8_per_tensor needs a quantized weight key");
}

// ---- proto::MoEParams -> MoEConfig
// ---------------------------------------------------------------

proto::MoEParams basic_params() {
  proto::MoEParams p;
  p.set_num_experts(8);
  p.set_top_k(2);
  p.set_hidden_size(16);
  p.set_intermediate_size(12);
  p.set_activation(proto::SILU_GATED);
  p.mutable_routing()->set_method(proto::SOFTMAX_TOPK);
  return p;
}

TEST(MoEParams, ParsesDeepSeekV3Style) {
  proto::MoEParams p = basic_params();
  proto::MoERoutingParams* r = p.mutable_routing();
  r->set_method(proto::GROUPED_TOPK);
  r->set_score_function(proto::MOE_SCORE_SIGMOID);
  r->set_num_groups(4);
  r->set_groups_kept(2);
  r->set_group_score(proto::MOE_GROUP_SUM_TOP2);
  r->set_renormalize(true);
  r->set_routed_scaling_factor(2.5f);
  r->set_has_score_correction_bias(true);
  p.mutable_shared()->set_intermediate_size(24);
  const MoEConfig c = moe_config_from_params(p);
  EXPECT_EQ(c.routing().method, RoutingMethod::kGroupedTopK);
  EXPECT_EQ(c.routing().score_function, ScoreFunction::kSigmoid);
  EXPECT_EQ(c.routing().num_groups, 4);
  EXPECT_EQ(c.routing().group_score, GroupScore::kSumTop2);
  EXPECT_EQ(c.routing().routed_scaling_factor, 2.5f);
  EXPECT_EQ(c.shared().activation.kind, MoEActivation::kSiluGated);
}

TEST(MoEParams, ParsesGptOssStyle) {
  proto::MoEParams p = basic_params();
  p.set_activation(proto::SWIGLU_OAI);
  p.set_swiglu_limit(5.0f);
  p.set_gate_up_interleaved(true);
  p.set_expert_layout(proto::MOE_LAYOUT_TRANSPOSED);
  p.set_has_w13_bias(true);
  p.set_has_w2_bias(true);
  p.mutable_routing()->set_method(proto::TOPK_SOFTMAX);
  p.mutable_routing()->set_has_router_bias(true);
  const MoEConfig c = moe_config_from_params(p);
  EXPECT_EQ(c.activation().kind, MoEActivation::kSwigluOai);
  EXPECT_EQ(c.activation().swiglu_alpha, 1.702f);
  EXPECT_EQ(c.activation().swiglu_limit, 5.0f);
  EXPECT_EQ(c.layout(), ExpertLayout::kTransposed);
  EXPECT_TRUE(c.gate_up_interleaved());
}

TEST(MoEParams, RejectsUnsetAndMisplacedFields) {
  proto::MoEParams p = basic_params();
  p.set_activation(proto::ACTIVATION_UNSPECIFIED);
  EXPECT_MG_ERROR(moe_config_from_params(p), "activation must be set");
  p = basic_params();
  p.mutable_routing()->set_method(proto::MOE_ROUTING_UNSPECIFIED);
  EXPECT_MG_ERROR(moe_config_from_params(p), "routing.method must be set");
  p = basic_params();
  p.mutable_routing()->set_num_groups(2);
  EXPECT_MG_ERROR(moe_config_from_params(p), "only used by GROUPED_TOPK");
  p = basic_params();
  p.mutable_routing()->set_score_function(proto::MOE_SCORE_SIGMOID);
  EXPECT_MG_ERROR(moe_config_from_params(p), "score_function is only used by GROUPED_TOPK");
  p = basic_params();
  p.mutable_routing()->set_method(proto::GROUPED_TOPK);
  EXPECT_MG_ERROR(moe_config_from_params(p), "score_function must be set for GROUPED_TOPK");
  p = basic_params();
  p.set_swiglu_alpha(1.0f);
  EXPECT_MG_ERROR(moe_config_from_params(p), "only used by SWIGLU_OAI");
  p = basic_params();
  p.mutable_shared()->set_activation(proto::GELU_GATED);
  EXPECT_MG_ERROR(moe_config_from_params(p), "no shared experts");
}

TEST(MoEParams, InputChecksNameTheInputAndTheExpectedShape) {
  proto::MoEParams p = basic_params();
  p.mutable_routing()->set_has_router_bias(true);
  const MoEConfig c = moe_config_from_params(p);
  std::vector<std::optional<ValueType>> in(moe_input::kCount);
  in[moe_input::kX] = ValueType{DType::kF32, {kTokens, 16}};
  in[moe_input::kRouterWeight] = ValueType{DType::kF32, {8, 16}};
  in[moe_input::kRouterBias] = ValueType{DType::kF32, {8}};
  in[moe_input::kW13] = ValueType{DType::kBF16, {8, 24, 16}};
  in[moe_input::kW2] = ValueType{DType::kBF16, {8, 16, 12}};
  check_moe_inputs(c, in);

  auto bad = in;
  bad[moe_input::kW13] = ValueType{DType::kBF16, {8, 16, 24}};
  EXPECT_MG_ERROR(
      check_moe_inputs(c, bad),
      "input 4 (w13, canonical layout) must have shape [8, 24, 16], got BF16[8, 16, 24]");
  bad = in;
  bad[moe_input::kRouterBias].reset();
  EXPECT_MG_ERROR(
      check_moe_inputs(c, bad),
      "input 2 (router_bias) is missing: it is read when routing.has_router_bias is set");
  bad = in;
  bad[moe_input::kScoreCorrectionBias] = ValueType{DType::kF32, {8}};
  EXPECT_MG_ERROR(check_moe_inputs(c, bad), "input 3 (score_correction_bias) is given, but");
  bad = in;
  bad[moe_input::kW2].reset();
  EXPECT_MG_ERROR(check_moe_inputs(c, bad), "input 6 (w2) is missing");
  bad = in;
  bad[moe_input::kX] = ValueType{DType::kF32, {kTokens, 15}};
  EXPECT_MG_ERROR(check_moe_inputs(c, bad), "input 0 (x) must have shape [T, 16]");
  bad = in;
  bad[moe_input::kW2] = ValueType{DType::kI32, {8, 16, 12}};
  EXPECT_MG_ERROR(check_moe_inputs(c, bad), "must be F32, F16, BF16 or F64");
}

}  // namespace
}  // namespace mg
