// MoE graph nodes shaped like the HF families, with random weights, for the op and parallel
// tests.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "framework/core/half.h"
#include "ops/moe/moe_params.h"
#include "proto/model.pb.h"
#include "tests/testing/test_util.h"

namespace mg::moe_test {

struct MoENode {
  std::string family;
  proto::Node node;
  // One tensor per node input (moe_input::*); undefined = absent. inputs[kX] is a placeholder
  // that fixes the example type; tests pass their own x.
  std::vector<Tensor> inputs;
};

inline Tensor to_bf16_tensor(const Tensor& t) {
  Tensor out = Tensor::empty_cpu(DType::kBF16, t.shape());
  auto* dst = static_cast<uint16_t*>(out.raw());
  for (int64_t i = 0; i < t.numel(); ++i) dst[i] = float_to_bf16(t.data<float>()[i]);
  return out;
}

// Families: mixtral, qwen2_moe, deepseek_v2, deepseek_v3, gpt_oss, llama4, granite_shared,
// relu2_sigmoid (a non-gated, sigmoid-routed layer).
inline MoENode make_moe_node(const std::string& family, uint32_t seed, int64_t E = 8, int64_t k = 2,
                             int64_t H = 32, int64_t I = 16, int64_t Is = 24) {
  MoENode n{family, {}, std::vector<Tensor>(moe_input::kCount)};
  proto::Node& node = n.node;
  node.set_name(family + ".moe");
  node.set_op("moe");
  node.add_outputs("out");
  proto::MoEParams* p = node.mutable_moe();
  proto::MoERoutingParams* r = p->mutable_routing();
  p->set_num_experts(E);
  p->set_top_k(k);
  p->set_hidden_size(H);
  p->set_intermediate_size(I);
  p->set_activation(proto::SILU_GATED);
  bool transposed = false, bf16 = false;
  if (family == "mixtral") {
    r->set_method(proto::SOFTMAX_TOPK);
    r->set_renormalize(true);
  } else if (family == "qwen2_moe") {
    r->set_method(proto::SOFTMAX_TOPK);
    p->mutable_shared()->set_intermediate_size(Is);
    p->mutable_shared()->set_has_gate(true);
  } else if (family == "deepseek_v2") {
    r->set_method(proto::GROUPED_TOPK);
    r->set_score_function(proto::MOE_SCORE_SOFTMAX);
    r->set_num_groups(4);
    r->set_groups_kept(2);
    r->set_group_score(proto::MOE_GROUP_MAX);
    r->set_routed_scaling_factor(16.0f);
    p->mutable_shared()->set_intermediate_size(Is);
  } else if (family == "deepseek_v3") {
    r->set_method(proto::GROUPED_TOPK);
    r->set_score_function(proto::MOE_SCORE_SIGMOID);
    r->set_num_groups(4);
    r->set_groups_kept(2);
    r->set_group_score(proto::MOE_GROUP_SUM_TOP2);
    r->set_has_score_correction_bias(true);
    r->set_renormalize(true);
    r->set_routed_scaling_factor(2.5f);
    p->mutable_shared()->set_intermediate_size(Is);
  } else if (family == "gpt_oss") {
    r->set_method(proto::TOPK_SOFTMAX);
    r->set_has_router_bias(true);
    p->set_activation(proto::SWIGLU_OAI);
    p->set_swiglu_limit(0.8f);  // small, so that random values reach the clamps
    p->set_gate_up_interleaved(true);
    p->set_expert_layout(proto::MOE_LAYOUT_TRANSPOSED);
    p->set_has_w13_bias(true);
    p->set_has_w2_bias(true);
    transposed = true;
    bf16 = true;
  } else if (family == "llama4") {
    r->set_method(proto::LLAMA4_TOP1_SIGMOID);
    p->set_top_k(1);
    k = 1;
    p->set_expert_layout(proto::MOE_LAYOUT_TRANSPOSED);
    p->mutable_shared()->set_intermediate_size(Is);
    transposed = true;
  } else if (family == "granite_shared") {
    r->set_method(proto::TOPK_SOFTMAX);
    p->set_activation(proto::GELU_TANH_GATED);
    p->mutable_shared()->set_intermediate_size(Is);
    p->mutable_shared()->set_activation(proto::SILU_GATED);
  } else if (family == "relu2_sigmoid") {
    r->set_method(proto::SIGMOID_TOPK);
    r->set_has_score_correction_bias(true);
    r->set_renormalize(true);
    p->set_activation(proto::RELU_SQUARED);
    p->mutable_shared()->set_intermediate_size(Is);
  } else {
    ADD_FAILURE() << "unknown family " << family;
  }
  const bool gated = p->activation() != proto::RELU_SQUARED;
  const int64_t N1 = gated ? 2 * I : I;
  const float s13 = 1.5f / std::sqrt(static_cast<float>(H));
  const float s2 = 1.5f / std::sqrt(static_cast<float>(I));
  using namespace moe_input;
  auto maybe_bf16 = [&](Tensor t) { return bf16 ? to_bf16_tensor(t) : t; };
  n.inputs[kX] = testing::random_tensor({1, H}, seed);
  n.inputs[kRouterWeight] = testing::random_tensor({E, H}, seed + 1, -0.5f, 0.5f);
  if (r->has_router_bias()) n.inputs[kRouterBias] = testing::random_tensor({E}, seed + 2);
  if (r->has_score_correction_bias()) {
    n.inputs[kScoreCorrectionBias] = testing::random_tensor({E}, seed + 3, -0.2f, 0.2f);
  }
  n.inputs[kW13] = maybe_bf16(
      testing::random_tensor(transposed ? Shape{E, H, N1} : Shape{E, N1, H}, seed + 4, -s13, s13));
  n.inputs[kW2] = maybe_bf16(
      testing::random_tensor(transposed ? Shape{E, I, H} : Shape{E, H, I}, seed + 5, -s2, s2));
  if (p->has_w13_bias()) n.inputs[kW13Bias] = maybe_bf16(testing::random_tensor({E, N1}, seed + 6));
  if (p->has_w2_bias()) n.inputs[kW2Bias] = maybe_bf16(testing::random_tensor({E, H}, seed + 7));
  if (p->shared().intermediate_size() > 0) {
    const float ss = 1.5f / std::sqrt(static_cast<float>(Is));
    const proto::Activation shared_act = p->shared().activation() != proto::ACTIVATION_UNSPECIFIED
                                             ? p->shared().activation()
                                             : p->activation();
    if (shared_act != proto::RELU_SQUARED && shared_act != proto::SILU &&
        shared_act != proto::GELU) {
      n.inputs[kSharedGate] = testing::random_tensor({Is, H}, seed + 8, -s13, s13);
    }
    n.inputs[kSharedUp] = testing::random_tensor({Is, H}, seed + 9, -s13, s13);
    n.inputs[kSharedDown] = testing::random_tensor({H, Is}, seed + 10, -ss, ss);
    if (p->shared().has_gate()) {
      n.inputs[kSharedExpertGate] = testing::random_tensor({1, H}, seed + 11);
    }
  }
  return n;
}

inline const char* const kFamilies[] = {"mixtral", "qwen2_moe", "deepseek_v2",    "deepseek_v3",
                                        "gpt_oss", "llama4",    "granite_shared", "relu2_sigmoid"};

// The node's input types as the compiler sees them (x with a token dimension T).
inline std::vector<std::optional<ValueType>> input_types(const std::vector<Tensor>& inputs) {
  std::vector<std::optional<ValueType>> types;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined()) {
      types.emplace_back();
      continue;
    }
    ValueType t{inputs[i].dtype(), inputs[i].shape()};
    if (i == moe_input::kX) t.shape[0] = kTokens;
    types.push_back(t);
  }
  return types;
}

// inputs with x replaced.
inline std::vector<Tensor> with_x(const MoENode& n, const Tensor& x) {
  std::vector<Tensor> in = n.inputs;
  in[moe_input::kX] = x;
  return in;
}

}  // namespace mg::moe_test
