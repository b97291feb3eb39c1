// The Hugging Face importer on the committed fixtures (tests/fixtures/hf) and on small
// config.json snippets: graph structure, stacked expert weights, relative weight paths, RoPE
// and routing settings per family. Numerical parity is tests/e2e/hf_golden_test.cc.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "framework/import/config_reader.h"
#include "framework/import/hf_common.h"
#include "framework/import/hf_importer.h"
#include "framework/io/weight_store.h"
#include "tests/testing/test_util.h"
#include "tests/unit/ops/nn_test_util.h"

namespace mg {
namespace {

using ::testing::ElementsAre;

const std::filesystem::path kFixtures = std::filesystem::path(MG_SOURCE_DIR) / "tests/fixtures/hf";

const proto::Node& node(const proto::Model& m, const std::string& name) {
  for (const proto::Node& n : m.nodes()) {
    if (n.name() == name) return n;
  }
  ADD_FAILURE() << "no node " << name;
  static const proto::Node empty;
  return empty;
}

const proto::TensorInfo& tensor(const proto::Model& m, const std::string& name) {
  for (const proto::TensorInfo& t : m.tensors()) {
    if (t.name() == name) return t;
  }
  ADD_FAILURE() << "no tensor " << name;
  static const proto::TensorInfo empty;
  return empty;
}

int count_op(const proto::Model& m, const std::string& op) {
  int n = 0;
  for (const proto::Node& node : m.nodes()) n += node.op() == op ? 1 : 0;
  return n;
}

TEST(HfImport, MixtralStacksPerExpertWeightsGateThenUp) {
  const HfImportResult r = import_hf_checkpoint(kFixtures / "mixtral");
  EXPECT_EQ(r.model_type, "mixtral");
  EXPECT_EQ(r.model.info().family(), "mixtral");
  EXPECT_EQ(r.model.info().vocab_size(), 128);
  EXPECT_EQ(r.model.info().max_seq_len(), 64);  // max_position_embeddings < 4096
  EXPECT_EQ(count_op(r.model, "moe"), 2);
  EXPECT_TRUE(r.unused_tensors.empty());

  const proto::MoEParams& p = node(r.model, "layers.0.moe").moe();
  EXPECT_EQ(p.num_experts(), 4);
  EXPECT_EQ(p.top_k(), 2);
  EXPECT_EQ(p.intermediate_size(), 48);
  EXPECT_EQ(p.routing().method(), proto::SOFTMAX_TOPK);
  EXPECT_TRUE(p.routing().renormalize());

  const proto::TensorInfo& w13 = tensor(r.model, "model.layers.0.block_sparse_moe.experts.w13");
  EXPECT_THAT(w13.shape(), ElementsAre(4, 96, 32));
  EXPECT_EQ(w13.file(), "model.safetensors");
  ASSERT_EQ(w13.parts_size(), 8);
  EXPECT_EQ(w13.parts(0).key(), "model.layers.0.block_sparse_moe.experts.0.w1.weight");
  EXPECT_EQ(w13.parts(1).key(), "model.layers.0.block_sparse_moe.experts.0.w3.weight");
  EXPECT_EQ(w13.parts(2).key(), "model.layers.0.block_sparse_moe.experts.1.w1.weight");
  EXPECT_EQ(node(r.model, "layers.0.attn").attention().sliding_window(), 8);

  // The assembled tensor loads as the experts' weights stacked in that order.
  WeightStore store(kFixtures / "mixtral" / "model.pbtxt");
  const Tensor stacked = store.load(w13);
  proto::TensorInfo one;
  one.set_name("w3_1");
  one.set_dtype(proto::F32);
  one.add_shape(48);
  one.add_shape(32);
  one.set_file("model.safetensors");
  one.set_key("model.layers.0.block_sparse_moe.experts.1.w3.weight");
  const Tensor w3_1 = store.load(one);
  const float* s = stacked.data<float>() + (1 * 96 + 48) * 32;
  for (int i = 0; i < 48 * 32; ++i) ASSERT_EQ(s[i], w3_1.data<float>()[i]) << i;
}

TEST(HfImport, WeightPathsAreRelativeToTheGraphDirectory) {
  const auto out = testing::temp_dir("graph-dir") / "nested";
  HfImportOptions options;
  options.graph_dir = out;
  const HfImportResult r = import_hf_checkpoint(kFixtures / "olmoe", options);
  const std::string file = tensor(r.model, "model.embed_tokens.weight").file();
  EXPECT_EQ(std::filesystem::weakly_canonical(out / file),
            std::filesystem::weakly_canonical(kFixtures / "olmoe/model.safetensors"));
}

TEST(HfImport, Qwen2MoeDenseLayersSharedExpertAndSlidingLayers) {
  const HfImportResult r = import_hf_checkpoint(kFixtures / "qwen2_moe");
  EXPECT_EQ(node(r.model, "layers.1.mlp").op(), "gated_mlp");  // mlp_only_layers = [1]
  const proto::MoEParams& p = node(r.model, "layers.0.moe").moe();
  EXPECT_EQ(p.shared().intermediate_size(), 40);
  EXPECT_TRUE(p.shared().has_gate());
  EXPECT_FALSE(p.routing().renormalize());
  EXPECT_TRUE(node(r.model, "layers.0.attn.q_proj").linear().has_bias());
  EXPECT_FALSE(node(r.model, "layers.0.attn.o_proj").linear().has_bias());
  EXPECT_EQ(node(r.model, "layers.0.attn").attention().sliding_window(), 6);
  EXPECT_EQ(node(r.model, "layers.1.attn").attention().sliding_window(), 0);
}

TEST(HfImport, DeepseekMlaSplitsProjectionsAndScalesSoftmax) {
  const HfImportResult r = import_hf_checkpoint(kFixtures / "deepseek_v2");
  const proto::AttentionParams& a = node(r.model, "layers.0.attn").attention();
  EXPECT_EQ(a.head_dim(), 12);
  EXPECT_EQ(a.v_head_dim(), 8);
  EXPECT_EQ(a.num_kv_heads(), 4);
  const double m = 0.1 * 0.707 * std::log(4.0) + 1.0;
  EXPECT_NEAR(a.scale(), 1.0 / std::sqrt(12.0) * m * m, 1e-6);
  EXPECT_EQ(node(r.model, "layers.0.mlp").op(), "gated_mlp");  // first_k_dense_replace = 1
  const proto::MoERoutingParams& routing = node(r.model, "layers.1.moe").moe().routing();
  EXPECT_EQ(routing.method(), proto::GROUPED_TOPK);
  EXPECT_EQ(routing.score_function(), proto::MOE_SCORE_SOFTMAX);
  EXPECT_EQ(routing.group_score(), proto::MOE_GROUP_MAX);
  EXPECT_EQ(routing.num_groups(), 4);
  EXPECT_EQ(routing.groups_kept(), 2);
  EXPECT_FLOAT_EQ(routing.routed_scaling_factor(), 16.0f);
  EXPECT_FALSE(routing.renormalize());

  // k_nope rows of kv_b_proj: head h contributes rows [h * 16, h * 16 + 8).
  const proto::TensorInfo& k_nope =
      tensor(r.model, "model.layers.0.self_attn.kv_b_proj.k_nope.weight");
  ASSERT_EQ(k_nope.parts_size(), 4);
  EXPECT_EQ(k_nope.parts(2).row_begin(), 32);
  EXPECT_EQ(k_nope.parts(2).row_end(), 40);
  const proto::TensorInfo& v = tensor(r.model, "model.layers.0.self_attn.kv_b_proj.v.weight");
  EXPECT_EQ(v.parts(2).row_begin(), 40);
  EXPECT_EQ(v.parts(2).row_end(), 48);
}

TEST(HfImport, DeepseekV3AndLiteRouting) {
  const HfImportResult v3 = import_hf_checkpoint(kFixtures / "deepseek_v3");
  const proto::MoERoutingParams& r = node(v3.model, "layers.1.moe").moe().routing();
  EXPECT_EQ(r.method(), proto::GROUPED_TOPK);
  EXPECT_EQ(r.score_function(), proto::MOE_SCORE_SIGMOID);
  EXPECT_EQ(r.group_score(), proto::MOE_GROUP_SUM_TOP2);
  EXPECT_TRUE(r.has_score_correction_bias());
  EXPECT_TRUE(r.renormalize());
  EXPECT_EQ(node(v3.model, "layers.0.attn.q_rope").rope().pairing(), proto::INTERLEAVED);

  const HfImportResult lite = import_hf_checkpoint(kFixtures / "deepseek_v2_lite");
  EXPECT_EQ(node(lite.model, "layers.0.attn.q_proj").op(), "linear");  // q_lora_rank null
  EXPECT_EQ(node(lite.model, "layers.1.moe").moe().routing().method(), proto::SOFTMAX_TOPK);
  EXPECT_EQ(node(lite.model, "layers.1.moe").moe().shared().intermediate_size(), 32);
}

TEST(HfImport, GptOssAndLlama4) {
  const HfImportResult gpt = import_hf_checkpoint(kFixtures / "gpt_oss");
  const proto::MoEParams& p = node(gpt.model, "layers.0.moe").moe();
  EXPECT_EQ(p.expert_layout(), proto::MOE_LAYOUT_TRANSPOSED);
  EXPECT_TRUE(p.gate_up_interleaved());
  EXPECT_EQ(p.activation(), proto::SWIGLU_OAI);
  EXPECT_TRUE(p.routing().has_router_bias());
  EXPECT_TRUE(node(gpt.model, "layers.0.attn").attention().has_sinks());
  EXPECT_EQ(node(gpt.model, "layers.0.attn").attention().sliding_window(), 4);
  EXPECT_EQ(node(gpt.model, "layers.1.attn").attention().sliding_window(), 0);
  EXPECT_EQ(node(gpt.model, "layers.0.attn.q_rope").rope().scaling().type(),
            proto::RopeScaling::YARN);

  const HfImportResult l4 = import_hf_checkpoint(kFixtures / "llama4");
  EXPECT_EQ(node(l4.model, "layers.0.mlp").op(), "gated_mlp");
  EXPECT_EQ(node(l4.model, "layers.1.moe").moe().routing().method(), proto::LLAMA4_TOP1_SIGMOID);
  EXPECT_EQ(node(l4.model, "layers.0.attn").attention().chunk_size(), 4);  // RoPE layer
  EXPECT_EQ(node(l4.model, "layers.1.attn").attention().chunk_size(), 0);  // NoPE layer
  EXPECT_EQ(node(l4.model, "layers.0.attn.q_l2norm").rms_norm().has_weight(), false);
  EXPECT_FLOAT_EQ(node(l4.model, "layers.1.attn.q_temperature").attn_temperature().floor_scale(),
                  4.0f);
}

TEST(HfImport, GraniteMultipliersTiedEmbeddingsAndSplitSharedMlp) {
  const HfImportResult r = import_hf_checkpoint(kFixtures / "granitemoeshared");
  EXPECT_FLOAT_EQ(node(r.model, "embed").embedding().scale(), 0.5f);
  EXPECT_FLOAT_EQ(node(r.model, "layers.0.attn_residual").add().scale(), 2.0f);
  EXPECT_FLOAT_EQ(node(r.model, "layers.0.attn").attention().scale(), 0.2f);
  EXPECT_FLOAT_EQ(node(r.model, "lm_head").linear().scale(), 0.25f);
  EXPECT_EQ(node(r.model, "lm_head").inputs(1), "model.embed_tokens.weight");
  const proto::TensorInfo& up = tensor(r.model, "model.layers.0.shared_mlp.input_linear.up.weight");
  EXPECT_EQ(up.parts(0).row_begin(), 40);
  EXPECT_EQ(up.parts(0).row_end(), 80);
}

// RoPE settings from config.json snippets: v5 rope_parameters and legacy rope_scaling.
RopeConfig rope_of(const std::string& json) {
  static nlohmann::json keep;  // the reader refers to it
  keep = nlohmann::json::parse(json);
  return read_rope(ConfigReader(keep, "config.json"), 4096, 10000.0);
}

TEST(HfRope, ReadsEveryScalingType) {
  const RopeConfig plain = rope_of(R"({"rope_theta": 500000})");
  EXPECT_EQ(plain.scaling.type(), proto::RopeScaling::NONE);
  EXPECT_EQ(plain.theta, 500000.0);

  const RopeConfig legacy = rope_of(
      R"({"rope_theta": 10000, "rope_scaling": {"type": "yarn", "factor": 40,
          "original_max_position_embeddings": 4096, "mscale": 1.0, "mscale_all_dim": 1.0,
          "beta_fast": 32, "beta_slow": 1}})");
  EXPECT_EQ(legacy.type, "yarn");
  EXPECT_EQ(legacy.scaling.type(), proto::RopeScaling::YARN);
  EXPECT_EQ(legacy.scaling.factor(), 40.0);
  EXPECT_EQ(legacy.mscale_all_dim, 1.0);
  EXPECT_FALSE(legacy.scaling.has_truncate());

  const RopeConfig v5 = rope_of(
      R"({"rope_parameters": {"rope_type": "yarn", "rope_theta": 150000, "factor": 32.0,
          "original_max_position_embeddings": 4096, "truncate": false}})");
  EXPECT_EQ(v5.theta, 150000.0);
  EXPECT_TRUE(v5.scaling.has_truncate());
  EXPECT_FALSE(v5.scaling.truncate());

  // yarn without a factor: max_position_embeddings / original.
  const RopeConfig implicit = rope_of(
      R"({"rope_parameters": {"rope_type": "yarn", "original_max_position_embeddings": 1024}})");
  EXPECT_EQ(implicit.scaling.factor(), 4.0);

  const RopeConfig llama3 = rope_of(
      R"({"rope_parameters": {"rope_type": "llama3", "rope_theta": 500000, "factor": 8.0,
          "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 8192}})");
  EXPECT_EQ(llama3.scaling.type(), proto::RopeScaling::LLAMA3);
  EXPECT_EQ(llama3.scaling.original_max_position(), 8192);
}

TEST(HfRope, RejectsUnsupportedTypes) {
  testing::expect_error([] { rope_of(R"({"rope_scaling": {"type": "dynamic", "factor": 2}})"); },
                        {"config.json (rope_scaling): key 'rope_type': RoPE type 'dynamic' is "
                         "not supported"});
  testing::expect_error([] { rope_of(R"({"rope_parameters": {"rope_type": "linear"}})"); },
                        {"config.json (rope_parameters): missing key 'factor'"});
}

TEST(HfImport, SupportedModelTypes) {
  EXPECT_THAT(hf_supported_model_types(),
              ::testing::IsSupersetOf({"mixtral", "qwen2_moe", "qwen3_moe", "olmoe", "deepseek_v2",
                                       "deepseek_v3", "gpt_oss", "llama4_text", "llama4",
                                       "granitemoe", "granitemoeshared"}));
}

}  // namespace
}  // namespace mg
