// Weight-only INT4 / INT8 Hugging Face goldens: the fixtures of tests/fixtures/hf made by
// tools/hf/make_wna16_fixtures.py (README_wna16.md: GPTQ v1 4-bit group 16 with act-order, AWQ
// GEMM 4-bit group 16, compressed-tensors pack-quantized int4 group 16 symmetric and int8
// channel-wise asymmetric) are imported with their codes in the checkpoint's packing and run on
// the CPU: the prompt logits of the dequantized fp32 model in transformers within 1e-4
// normalised with the same argmax at every position, and the same greedy ids. The imported graph
// keeps the codes (packing, element, MoE quant_scheme) and `inspect --plan` picks cpu_wna16.
// Bad checkpoints (missing / mis-shaped / mistyped qzeros, scales, g_idx, bits 3, packed length
// that disagrees with the config, g_idx out of range) are one error line naming the tensor, exit 2.
#include <algorithm>
#include <cstring>
#include <fstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "framework/compile/compiler.h"
#include "framework/import/hf_importer.h"
#include "framework/io/json.h"
#include "framework/io/npy.h"
#include "framework/io/safetensors.h"
#include "framework/op/op_registry.h"
#include "framework/runtime/session.h"
#include "tests/testing/command.h"
#include "tests/testing/test_util.h"

namespace mg {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

const std::filesystem::path kFixtures = std::filesystem::path(MG_SOURCE_DIR) / "tests/fixtures/hf";
constexpr double kMaxNormalizedError = 1e-4;

struct Wna16Fixture {
  std::string name;
  proto::MoEQuantScheme scheme;
  proto::QuantElement element;
  proto::QuantPacking packing;
  std::string moe_prefix;        // "model.layers.N.mlp."
  std::string router;            // the router weight, kept fp32
  std::string attention_weight;  // a quantized attention weight
};

std::vector<Wna16Fixture> fixtures() {
  return {
      {"qwen3_moe_gptq", proto::MOE_QUANT_INT4_WEIGHT_ONLY, proto::QUANT_ELEMENT_UINT4,
       proto::QUANT_PACKING_GPTQ, "model.layers.1.mlp.", "model.layers.1.mlp.gate.weight",
       "model.layers.0.self_attn.o_proj.weight"},
      {"qwen3_moe_awq", proto::MOE_QUANT_INT4_WEIGHT_ONLY, proto::QUANT_ELEMENT_UINT4,
       proto::QUANT_PACKING_AWQ, "model.layers.1.mlp.", "model.layers.1.mlp.gate.weight",
       "model.layers.0.self_attn.q_proj.weight"},
      {"mixtral_ct_w4a16", proto::MOE_QUANT_INT4_WEIGHT_ONLY, proto::QUANT_ELEMENT_UINT4,
       proto::QUANT_PACKING_COMPRESSED_TENSORS, "model.layers.1.block_sparse_moe.",
       "model.layers.1.block_sparse_moe.gate.weight", "model.layers.0.self_attn.k_proj.weight"},
      {"mixtral_ct_w8a16", proto::MOE_QUANT_INT8_WEIGHT_ONLY, proto::QUANT_ELEMENT_UINT8,
       proto::QUANT_PACKING_COMPRESSED_TENSORS, "model.layers.1.block_sparse_moe.",
       "model.layers.1.block_sparse_moe.gate.weight", "model.layers.0.self_attn.o_proj.weight"},
  };
}

struct Reference {
  std::vector<int32_t> prompt;
  std::vector<int32_t> greedy;
  Tensor logits;
};

Reference load_reference(const std::filesystem::path& dir) {
  const std::filesystem::path file = dir / "reference.json";
  const nlohmann::json ref = load_json_file(file);
  Reference r;
  for (int64_t id : json_int_array(ref, "prompt_ids", file)) {
    r.prompt.push_back(static_cast<int32_t>(id));
  }
  for (int64_t id : json_int_array(ref, "greedy_ids", file)) {
    r.greedy.push_back(static_cast<int32_t>(id));
  }
  r.logits = read_npy(dir / "logits.npy");
  return r;
}

const proto::TensorInfo* find_tensor(const proto::Model& m, const std::string& name) {
  for (const proto::TensorInfo& t : m.tensors()) {
    if (t.name() == name) return &t;
  }
  return nullptr;
}

std::unique_ptr<Session> open_imported(const std::filesystem::path& hf_dir) {
  HfImportResult imported = import_hf_checkpoint(hf_dir);
  CompileOptions options;
  options.max_tokens = 64;
  std::shared_ptr<const ExecutionPlan> plan =
      compile_model(std::move(imported.model), hf_dir / "model.pbtxt", options);
  SessionOptions session;
  session.threads = 2;
  return std::make_unique<Session>(std::move(plan), session);
}

int64_t argmax_row(const float* logits, int64_t t, int64_t vocab) {
  const float* row = logits + t * vocab;
  return std::max_element(row, row + vocab) - row;
}

class HfWna16Golden : public ::testing::TestWithParam<Wna16Fixture> {
 protected:
  void SetUp() override {
    if (OpRegistry::global().find("moe") == nullptr) {
      GTEST_SKIP() << "op 'moe' is not registered in this build yet; the fixtures need it";
    }
    dir_ = kFixtures / GetParam().name;
    ASSERT_TRUE(std::filesystem::exists(dir_ / "reference.json"))
        << dir_ << " is missing: run tools/hf/make_wna16_fixtures.py";
    ref_ = load_reference(dir_);
  }
  std::filesystem::path dir_;
  Reference ref_;
};

TEST_P(HfWna16Golden, ImportKeepsTheCheckpointsPacking) {
  const Wna16Fixture& f = GetParam();
  const proto::Model m = import_hf_checkpoint(dir_).model;
  EXPECT_EQ(m.format_version(), 3u);
  for (const std::string& name :
       {f.moe_prefix + "experts.w13", f.moe_prefix + "experts.w2", f.attention_weight}) {
    const proto::TensorInfo* t = find_tensor(m, name);
    ASSERT_NE(t, nullptr) << name;
    EXPECT_EQ(t->dtype(), proto::I32) << name;
    ASSERT_TRUE(t->has_quantization()) << name;
    EXPECT_EQ(t->quantization().element(), f.element) << name;
    EXPECT_EQ(t->quantization().packing(), f.packing) << name;
    EXPECT_GE(t->quantization().logical_shape_size(), 2) << name;
  }
  const proto::TensorInfo* router = find_tensor(m, f.router);
  ASSERT_NE(router, nullptr);
  EXPECT_EQ(router->dtype(), proto::F32);
  EXPECT_FALSE(router->has_quantization());
  bool found = false;
  for (const proto::Node& n : m.nodes()) {
    if (n.op() != "moe") continue;
    found = true;
    EXPECT_EQ(n.moe().quant_scheme(), f.scheme) << n.name();
  }
  EXPECT_TRUE(found);
}

TEST_P(HfWna16Golden, PromptLogitsMatchTheDequantizedModel) {
  auto session = open_imported(dir_);
  std::vector<int32_t> positions(ref_.prompt.size());
  for (size_t i = 0; i < positions.size(); ++i) positions[i] = static_cast<int32_t>(i);
  const Tensor& logits = session->forward(ref_.prompt, positions);
  ASSERT_EQ(logits.shape(), ref_.logits.shape());
  const double err =
      testing::normalized_error(testing::span_of(logits), testing::span_of(ref_.logits));
  EXPECT_LE(err, kMaxNormalizedError) << GetParam().name;
  ::testing::Test::RecordProperty("normalized_error", fmt::format("{:.3g}", err));
  const int64_t tokens = ref_.logits.dim(0), vocab = ref_.logits.dim(1);
  for (int64_t t = 0; t < tokens; ++t) {
    EXPECT_EQ(argmax_row(logits.data<float>(), t, vocab),
              argmax_row(ref_.logits.data<float>(), t, vocab))
        << "position " << t;
  }
}

TEST_P(HfWna16Golden, GreedyIdsMatch) {
  auto session = open_imported(dir_);
  GenerateOptions gen;
  gen.max_new_tokens = static_cast<int>(ref_.greedy.size());
  gen.stop_at_eos = false;
  EXPECT_EQ(session->generate(ref_.prompt, gen).tokens, ref_.greedy);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, HfWna16Golden, ::testing::ValuesIn(fixtures()),
                         [](const auto& info) { return info.param.name; });

// ---- The command line and bad checkpoints ----

std::filesystem::path copy_fixture(const std::string& name, const std::string& fixture) {
  const auto dir = testing::temp_dir(name);
  for (const char* f : {"config.json", "model.safetensors", "logits.npy", "reference.json"}) {
    std::filesystem::copy_file(kFixtures / fixture / f, dir / f,
                               std::filesystem::copy_options::overwrite_existing);
  }
  return dir;
}

void edit_weights(const std::filesystem::path& dir,
                  const std::function<void(std::vector<std::pair<std::string, Tensor>>&)>& edit) {
  std::vector<std::pair<std::string, Tensor>> tensors;
  {
    auto file = SafetensorsFile::open(dir / "model.safetensors");
    for (const SafetensorsEntry& e : file->entries()) {
      const Tensor src = file->tensor(e);
      Tensor copy = Tensor::empty_cpu(src.dtype(), src.shape());
      std::memcpy(copy.raw(), src.raw(), src.nbytes());
      tensors.emplace_back(e.name, copy);
    }
  }
  edit(tensors);
  write_safetensors(dir / "model.safetensors", tensors);
}

// Replaces `key` by zeros of `dtype` [shape], or removes it.
void replace_tensor(const std::filesystem::path& dir, const std::string& key, DType dtype,
                    const Shape& shape, bool remove = false) {
  edit_weights(dir, [&](auto& tensors) {
    for (auto it = tensors.begin(); it != tensors.end(); ++it) {
      if (it->first != key) continue;
      if (remove) {
        tensors.erase(it);
        return;
      }
      it->second = Tensor::empty_cpu(dtype, shape);
      std::memset(it->second.raw(), 0, it->second.nbytes());
      return;
    }
    FAIL() << "no tensor " << key;
  });
}

void edit_config(const std::filesystem::path& dir,
                 const std::function<void(nlohmann::json&)>& edit) {
  nlohmann::json config = load_json_file(dir / "config.json");
  edit(config["quantization_config"]);
  std::ofstream(dir / "config.json", std::ios::binary | std::ios::trunc) << config.dump(2);
}

void expect_clean_error(const testing::CommandResult& r,
                        std::initializer_list<std::string> fragments) {
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_THAT(r.err, StartsWith("moegraph: error: "));
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  for (const std::string& f : fragments) EXPECT_THAT(r.err, HasSubstr(f));
}

testing::CommandResult import(const std::filesystem::path& dir) {
  return testing::run_moegraph({"import-hf", dir.string(), "-o", (dir / "out").string()});
}

testing::CommandResult run_one_token(const std::filesystem::path& dir) {
  return testing::run_moegraph(
      {"run", dir.string(), "--prompt-ids", "1,2,3", "--max-new-tokens", "1", "--threads", "1"});
}

TEST(HfWna16CommandLine, ImportInspectAndRun) {
  const std::filesystem::path hf = kFixtures / "qwen3_moe_gptq";
  const Reference ref = load_reference(hf);
  const auto out = testing::temp_dir("imported-gptq");
  const testing::CommandResult imported =
      testing::run_moegraph({"import-hf", hf.string(), "-o", out.string()});
  ASSERT_EQ(imported.exit_code, 0) << imported.err;
  const testing::CommandResult plan = testing::run_moegraph({"inspect", out.string(), "--plan"});
  ASSERT_EQ(plan.exit_code, 0) << plan.err;
  EXPECT_THAT(plan.out, HasSubstr("cpu_wna16 (auto"));
  EXPECT_THAT(plan.out, HasSubstr("cpu_eigen: rejected"));
  const std::string prompt = fmt::format("{}", fmt::join(ref.prompt, ","));
  const testing::CommandResult run =
      testing::run_moegraph({"run", out.string(), "--prompt-ids", prompt, "--max-new-tokens",
                             std::to_string(ref.greedy.size()), "--threads", "2"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr(fmt::format("generated ids: {}", fmt::join(ref.greedy, " "))));
}

TEST(HfBadWna16Checkpoint, GoodCopiesImport) {
  for (const Wna16Fixture& f : fixtures()) {
    const auto dir = copy_fixture("good-" + f.name, f.name);
    const testing::CommandResult r = import(dir);
    EXPECT_EQ(r.exit_code, 0) << f.name << ": " << r.err;
  }
}

TEST(HfBadWna16Checkpoint, QzerosOfTheWrongShape) {
  const auto dir = copy_fixture("wna16-qzeros-shape", "qwen3_moe_gptq");
  // experts.2.up_proj: out 24, in 32, groups of 16: qzeros [2, 3].
  replace_tensor(dir, "model.layers.1.mlp.experts.2.up_proj.qzeros", DType::kI32, {2, 4});
  expect_clean_error(import(dir), {"tensor 'model.layers.1.mlp.experts.2.up_proj.qzeros'",
                                   "has shape [2, 4]", "needs [2, 3]"});
}

TEST(HfBadWna16Checkpoint, MissingQzerosScalesAndGidx) {
  for (const char* suffix : {"qzeros", "scales", "g_idx"}) {
    const auto dir = copy_fixture(std::string("wna16-missing-") + suffix, "qwen3_moe_gptq");
    const std::string key = std::string("model.layers.0.self_attn.v_proj.") + suffix;
    replace_tensor(dir, key, DType::kI32, {}, /*remove=*/true);
    expect_clean_error(import(dir), {"tensor '" + key + "'", "missing"});
  }
}

TEST(HfBadWna16Checkpoint, MisShapedScaleAndWrongDtypes) {
  const auto dir = copy_fixture("wna16-scale-shape", "qwen3_moe_awq");
  replace_tensor(dir, "model.layers.0.self_attn.q_proj.scales", DType::kF16, {1, 64});
  expect_clean_error(import(dir), {"tensor 'model.layers.0.self_attn.q_proj.scales'",
                                   "has shape [1, 64]", "needs [2, 64]"});
  const auto dir2 = copy_fixture("wna16-qweight-dtype", "qwen3_moe_awq");
  replace_tensor(dir2, "model.layers.0.self_attn.q_proj.qweight", DType::kF16, {32, 8});
  expect_clean_error(import(dir2), {"tensor 'model.layers.0.self_attn.q_proj.qweight'",
                                    "is F16, but awq", "as I32"});
  const auto dir3 = copy_fixture("wna16-scale-dtype", "mixtral_ct_w4a16");
  replace_tensor(dir3, "model.layers.0.self_attn.k_proj.weight_scale", DType::kI32, {16, 2});
  expect_clean_error(import(dir3), {"scale 'model.layers.0.self_attn.k_proj.weight_scale'",
                                    "is I32, expected F32, BF16 or F16"});
}

TEST(HfBadWna16Checkpoint, PackedLengthThatDisagreesWithTheShape) {
  // k_proj is [16, 32]: 4 int32 words of 8 nibbles per row; 3 would hold 24 columns.
  const auto dir = copy_fixture("wna16-packed-length", "mixtral_ct_w4a16");
  replace_tensor(dir, "model.layers.0.self_attn.k_proj.weight_packed", DType::kI32, {16, 3});
  expect_clean_error(import(dir), {"tensor 'model.layers.0.self_attn.k_proj.weight_packed'",
                                   "has shape [16, 3]", "needs [16, 4]"});
  const auto dir2 = copy_fixture("wna16-weight-shape", "mixtral_ct_w4a16");
  replace_tensor(dir2, "model.layers.0.self_attn.k_proj.weight_shape", DType::kI64, {3});
  expect_clean_error(import(dir2), {"tensor 'model.layers.0.self_attn.k_proj.weight_shape' is "
                                    "I64[3]"});
  // weight_shape saying another shape than the packed tensors hold.
  const auto dir3 = copy_fixture("wna16-weight-shape-value", "mixtral_ct_w4a16");
  edit_weights(dir3, [](auto& tensors) {
    for (auto& [name, t] : tensors) {
      if (name == "model.layers.0.self_attn.k_proj.weight_shape")
        t.template data<int64_t>()[1] = 31;
    }
  });
  expect_clean_error(import(dir3),
                     {"tensor 'model.layers.0.self_attn.k_proj.weight_shape' says the packed "
                      "module is [16, 31], but config.json implies [16, 32]"});
}

TEST(HfBadWna16Checkpoint, UnsupportedConfigs) {
  const auto dir = copy_fixture("wna16-bits3", "qwen3_moe_gptq");
  edit_config(dir, [](nlohmann::json& q) { q["bits"] = 3; });
  expect_clean_error(import(dir),
                     {"config.json", "'bits'", "3-bit GPTQ weights are not supported"});
  const auto dir2 = copy_fixture("wna16-awq-gemv", "qwen3_moe_awq");
  edit_config(dir2, [](nlohmann::json& q) { q["version"] = "gemv"; });
  expect_clean_error(import(dir2), {"AWQ version 'gemv' is not supported"});
  const auto dir3 = copy_fixture("wna16-ct-float", "mixtral_ct_w4a16");
  edit_config(dir3,
              [](nlohmann::json& q) { q["config_groups"]["group_0"]["weights"]["num_bits"] = 2; });
  expect_clean_error(import(dir3), {"2-bit int weights are not supported"});
}

TEST(HfBadWna16Checkpoint, GidxOutOfRangeAtLoad) {
  // A g_idx value past the groups is found when the weights are converted: `run` names it.
  const auto dir = copy_fixture("wna16-gidx-range", "qwen3_moe_gptq");
  edit_weights(dir, [](auto& tensors) {
    for (auto& [name, t] : tensors) {
      if (name == "model.layers.0.self_attn.k_proj.g_idx") t.template data<int32_t>()[3] = 9;
    }
  });
  expect_clean_error(run_one_token(dir),
                     {"model.layers.0.self_attn.k_proj.weight", "g_idx[3]", "outside [0, 2)"});
}

}  // namespace
}  // namespace mg
