// FP4 Hugging Face goldens: tests/fixtures/hf/gpt_oss_mxfp4 (tools/hf/make_fp4_fixtures.py,
// README_fp4.md) is GPT-OSS with its experts in the Hub's MXFP4 layout (*_blocks / *_scales,
// quant_method mxfp4). Imported with its packed codes and E8M0 scales and run on the CPU
// (cpu_fp4): the logits of transformers' own load of the folder within 1e-4 normalised, the same
// argmax at every position, token by token too, and the same greedy ids; `inspect --plan` names
// cpu_fp4 and the rejected backends. Bad MXFP4 checkpoints (a missing or mis-shaped blocks / scales
// tensor, a wrong dtype, an E8M0 NaN scale) are one error line, exit 2. tests/fixtures/hf/
// mixtral_nvfp4 is Mixtral with ModelOpt NVFP4 experts (hf_quant_config.json): imported with
// codes, E4M3 scales and global scales, it matches the dequantized model's golden.
#include <algorithm>
#include <cstring>
#include <fstream>
#include <functional>

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

const std::filesystem::path kFixture =
    std::filesystem::path(MG_SOURCE_DIR) / "tests/fixtures/hf/gpt_oss_mxfp4";
constexpr double kMaxNormalizedError = 1e-4;

struct Reference {
  std::vector<int32_t> prompt;
  std::vector<int32_t> greedy;
  Tensor logits;
};

std::vector<int32_t> ids(const nlohmann::json& j, const char* key) {
  std::vector<int32_t> out;
  for (const auto& v : j.at(key)) out.push_back(v.get<int32_t>());
  return out;
}

Reference load_reference() {
  const nlohmann::json ref = load_json_file(kFixture / "reference.json");
  return {ids(ref, "prompt_ids"), ids(ref, "greedy_ids"), read_npy(kFixture / "logits.npy")};
}

std::unique_ptr<Session> open_model(proto::Model model, const std::filesystem::path& hf_dir) {
  CompileOptions options;
  options.max_tokens = 64;
  SessionOptions session;
  session.threads = 2;
  return std::make_unique<Session>(compile_model(std::move(model), hf_dir / "model.pbtxt", options),
                                   session);
}

std::unique_ptr<Session> open_imported(const std::filesystem::path& hf_dir) {
  return open_model(import_hf_checkpoint(hf_dir).model, hf_dir);
}

int64_t argmax_row(const float* logits, int64_t t, int64_t vocab) {
  const float* row = logits + t * vocab;
  return std::max_element(row, row + vocab) - row;
}

void expect_logits_match(const Tensor& got, const Tensor& expected, const std::string& what) {
  ASSERT_EQ(got.shape(), expected.shape()) << what;
  const double err = testing::normalized_error(testing::span_of(got), testing::span_of(expected));
  EXPECT_LE(err, kMaxNormalizedError) << what;
  for (int64_t t = 0; t < expected.dim(0); ++t) {
    EXPECT_EQ(argmax_row(got.data<float>(), t, expected.dim(1)),
              argmax_row(expected.data<float>(), t, expected.dim(1)))
        << what << ": argmax differs at position " << t;
  }
  ::testing::Test::RecordProperty(what + "_normalized_error", fmt::format("{:.3g}", err));
}

std::vector<int32_t> positions(size_t n) {
  std::vector<int32_t> p(n);
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<int32_t>(i);
  return p;
}

class HfMxfp4Golden : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(std::filesystem::exists(kFixture / "reference.json"))
        << kFixture << " is missing: run tools/hf/make_fp4_fixtures.py";
    ref_ = load_reference();
  }
  Reference ref_;
};

TEST_F(HfMxfp4Golden, ImportKeepsPackedCodesAndScales) {
  const proto::Model m = import_hf_checkpoint(kFixture).model;
  auto find = [&](const std::string& name) -> const proto::TensorInfo* {
    for (const proto::TensorInfo& t : m.tensors()) {
      if (t.name() == name) return &t;
    }
    return nullptr;
  };
  // H = I = 32, 4 experts: w13 [4, 64, 32] as U8 [4, 64, 16], w2 [4, 32, 32] as U8 [4, 32, 16].
  for (const auto& [name, rows] :
       {std::pair{std::string("gate_up_proj"), 64}, std::pair{std::string("down_proj"), 32}}) {
    const std::string key = "model.layers.1.mlp.experts." + name;
    const proto::TensorInfo* t = find(key + "_blocks");
    ASSERT_NE(t, nullptr) << key;
    EXPECT_EQ(t->dtype(), proto::U8);
    EXPECT_THAT(t->shape(), ::testing::ElementsAre(4, rows, 16));
    EXPECT_EQ(t->quantization().element(), proto::QUANT_ELEMENT_FP4_E2M1);
    EXPECT_EQ(t->quantization().scale(), key + "_scales");
    EXPECT_EQ(t->quantization().group_rows(), 1);
    EXPECT_EQ(t->quantization().group_cols(), 32);
    const proto::TensorInfo* s = find(key + "_scales");
    ASSERT_NE(s, nullptr);
    EXPECT_EQ(s->dtype(), proto::U8);
  }
  int moe_nodes = 0;
  for (const proto::Node& n : m.nodes()) {
    if (n.op() != "moe") continue;
    ++moe_nodes;
    EXPECT_EQ(n.moe().quant_scheme(), proto::MOE_QUANT_MXFP4);
    EXPECT_EQ(n.moe().expert_layout(), proto::MOE_LAYOUT_CANONICAL);
    EXPECT_TRUE(n.moe().gate_up_interleaved());
  }
  EXPECT_EQ(moe_nodes, 2);
}

TEST_F(HfMxfp4Golden, PromptLogitsMatchTransformers) {
  auto session = open_imported(kFixture);
  expect_logits_match(session->forward(ref_.prompt, positions(ref_.prompt.size())), ref_.logits,
                      "mxfp4 prompt");
}

TEST_F(HfMxfp4Golden, TokenByTokenLogitsMatch) {
  auto session = open_imported(kFixture);
  const int64_t vocab = ref_.logits.dim(1);
  Tensor steps = Tensor::empty_cpu(DType::kF32, ref_.logits.shape());
  for (size_t t = 0; t < ref_.prompt.size(); ++t) {
    const int32_t id = ref_.prompt[t], pos = static_cast<int32_t>(t);
    const Tensor& row = session->forward({&id, 1}, {&pos, 1});
    std::copy_n(row.data<float>(), vocab, steps.data<float>() + t * vocab);
  }
  expect_logits_match(steps, ref_.logits, "mxfp4 token-by-token");
}

TEST_F(HfMxfp4Golden, GreedyIdsMatch) {
  auto session = open_imported(kFixture);
  GenerateOptions gen;
  gen.max_new_tokens = static_cast<int>(ref_.greedy.size());
  gen.stop_at_eos = false;
  EXPECT_EQ(session->generate(ref_.prompt, gen).tokens, ref_.greedy);
}

TEST_F(HfMxfp4Golden, CommandLineImportInspectAndRun) {
  const auto out = testing::temp_dir("imported-mxfp4");
  const testing::CommandResult imported =
      testing::run_moegraph({"import-hf", kFixture.string(), "-o", out.string()});
  ASSERT_EQ(imported.exit_code, 0) << imported.err;
  const testing::CommandResult plan = testing::run_moegraph({"inspect", out.string(), "--plan"});
  ASSERT_EQ(plan.exit_code, 0) << plan.err;
  EXPECT_THAT(plan.out, HasSubstr("cpu_fp4 (auto"));
  EXPECT_THAT(plan.out, HasSubstr("cpu_eigen: rejected, quant: "));
  const auto npy = out / "logits.npy";
  const testing::CommandResult run = testing::run_moegraph(
      {"run", out.string(), "--prompt-ids", fmt::format("{}", fmt::join(ref_.prompt, ",")),
       "--max-new-tokens", std::to_string(ref_.greedy.size()), "--dump-logits", npy.string(),
       "--threads", "2"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_LE(
      testing::normalized_error(testing::span_of(read_npy(npy)), testing::span_of(ref_.logits)),
      kMaxNormalizedError);
  EXPECT_THAT(run.out, HasSubstr(fmt::format("generated ids: {}", fmt::join(ref_.greedy, " "))));
}

// ---- Bad MXFP4 checkpoints: one error line, exit 2 ------------------------------------------

std::filesystem::path copy_fixture(const std::string& name) {
  const auto dir = testing::temp_dir(name);
  for (const char* f : {"config.json", "model.safetensors"}) {
    std::filesystem::copy_file(kFixture / f, dir / f,
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

const std::string kScales = "model.layers.0.mlp.experts.down_proj_scales";
const std::string kBlocks = "model.layers.0.mlp.experts.gate_up_proj_blocks";

TEST(HfBadMxfp4Checkpoint, MissingScales) {
  const auto dir = copy_fixture("mxfp4-missing");
  edit_weights(
      dir, [](auto& t) { std::erase_if(t, [](const auto& nt) { return nt.first == kScales; }); });
  expect_clean_error(import(dir), {"tensor '" + kScales + "' is missing"});
}

TEST(HfBadMxfp4Checkpoint, MisShapedBlocksAndScales) {
  const auto dir = copy_fixture("mxfp4-misshaped");
  edit_weights(dir, [](auto& t) {
    for (auto& [name, v] : t) {
      if (name == kBlocks) v = v.reshape({4, 64, 16, 1});
    }
  });
  expect_clean_error(import(dir),
                     {"tensor '" + kBlocks + "'",
                      "has shape [4, 64, 16, 1], but config.json implies [4, 64, 1, 16]"});
  // Blocks and scales that disagree on the group count: two scales per row for one block.
  const auto dir2 = copy_fixture("mxfp4-scale-count");
  edit_weights(dir2, [](auto& t) {
    for (auto& [name, v] : t) {
      if (name == kScales) v = Tensor::empty_cpu(DType::kU8, {4, 32, 2});
    }
  });
  expect_clean_error(import(dir2), {"tensor '" + kScales + "'",
                                    "has shape [4, 32, 2], but config.json implies [4, 32, 1]"});
}

TEST(HfBadMxfp4Checkpoint, WrongDtype) {
  const auto dir = copy_fixture("mxfp4-dtype");
  edit_weights(dir, [](auto& t) {
    for (auto& [name, v] : t) {
      if (name == kScales) v = Tensor::empty_cpu(DType::kF32, v.shape());
    }
  });
  expect_clean_error(import(dir), {"MXFP4 tensor '" + kScales + "'", "is F32, expected U8"});
}

TEST(HfBadMxfp4Checkpoint, E8M0NaNScale) {
  const auto dir = copy_fixture("mxfp4-nan");
  edit_weights(dir, [](auto& t) {
    for (auto& [name, v] : t) {
      if (name == kScales) static_cast<uint8_t*>(v.raw())[5] = 0xFF;
    }
  });
  ASSERT_EQ(import(dir).exit_code, 0);
  expect_clean_error(testing::run_moegraph({"run", (dir / "out").string(), "--prompt-ids", "1,2",
                                            "--max-new-tokens", "1"}),
                     {"tensor 'model.layers.0.mlp.experts.down_proj_blocks'", "E8M0 0xFF is NaN"});
}

TEST(HfBadMxfp4Checkpoint, OtherFamiliesAreRefused) {
  const auto dir = testing::temp_dir("mxfp4-mixtral");
  const auto mixtral = std::filesystem::path(MG_SOURCE_DIR) / "tests/fixtures/hf/mixtral";
  for (const char* f : {"config.json", "model.safetensors"}) {
    std::filesystem::copy_file(mixtral / f, dir / f,
                               std::filesystem::copy_options::overwrite_existing);
  }
  nlohmann::json config = load_json_file(dir / "config.json");
  config["quantization_config"] = {{"quant_method", "mxfp4"}};
  std::ofstream(dir / "config.json", std::ios::trunc) << config.dump(2);
  expect_clean_error(import(dir), {"'mxfp4' is supported for model_type gpt_oss only"});
}

// ---- NVFP4 (ModelOpt) ----------------------------------------------------------------------

const std::filesystem::path kNvfp4 =
    std::filesystem::path(MG_SOURCE_DIR) / "tests/fixtures/hf/mixtral_nvfp4";

TEST(HfNvfp4Golden, ImportKeepsCodesScalesAndGlobalScales) {
  const proto::Model m = import_hf_checkpoint(kNvfp4).model;
  auto find = [&](const std::string& name) -> const proto::TensorInfo* {
    for (const proto::TensorInfo& t : m.tensors()) {
      if (t.name() == name) return &t;
    }
    return nullptr;
  };
  // Mixtral H = 32, I = 48, 4 experts: w13 [4, 96, 32] as U8 [4, 96, 16], scales [4, 96, 2] E4M3,
  // one global scale per stacked matrix (w1, w3) [4, 2].
  const std::string w13 = "model.layers.0.block_sparse_moe.experts.w13";
  const proto::TensorInfo* t = find(w13);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->dtype(), proto::U8);
  EXPECT_THAT(t->shape(), ::testing::ElementsAre(4, 96, 16));
  EXPECT_EQ(t->quantization().element(), proto::QUANT_ELEMENT_FP4_E2M1);
  EXPECT_EQ(t->quantization().group_cols(), 16);
  const proto::TensorInfo* s = find(t->quantization().scale());
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->dtype(), proto::F8_E4M3);
  const proto::TensorInfo* g = find(t->quantization().global_scale());
  ASSERT_NE(g, nullptr);
  EXPECT_THAT(g->shape(), ::testing::ElementsAre(4, 2));
  for (const proto::Node& n : m.nodes()) {
    if (n.op() == "moe") {
      EXPECT_EQ(n.moe().quant_scheme(), proto::MOE_QUANT_NVFP4);
    }
  }
}

TEST(HfNvfp4Golden, LogitsAndGreedyIdsMatchTheDequantizedModel) {
  const nlohmann::json ref = load_json_file(kNvfp4 / "reference.json");
  const std::vector<int32_t> prompt = ids(ref, "prompt_ids"), greedy = ids(ref, "greedy_ids");
  auto session = open_imported(kNvfp4);
  expect_logits_match(session->forward(prompt, positions(prompt.size())),
                      read_npy(kNvfp4 / "logits.npy"), "nvfp4 prompt");
  auto again = open_imported(kNvfp4);
  GenerateOptions gen;
  gen.max_new_tokens = static_cast<int>(greedy.size());
  gen.stop_at_eos = false;
  EXPECT_EQ(again->generate(prompt, gen).tokens, greedy);
}

TEST(HfBadNvfp4Checkpoint, MissingAndMistypedScales) {
  const std::string key = "model.layers.1.block_sparse_moe.experts.2.w3.weight";
  auto copy = [&](const std::string& name) {
    const auto dir = testing::temp_dir(name);
    for (const char* f : {"config.json", "model.safetensors", "hf_quant_config.json"}) {
      std::filesystem::copy_file(kNvfp4 / f, dir / f,
                                 std::filesystem::copy_options::overwrite_existing);
    }
    return dir;
  };
  const auto missing = copy("nvfp4-missing");
  edit_weights(missing, [&](auto& t) {
    std::erase_if(t, [&](const auto& nt) { return nt.first == key + "_scale_2"; });
  });
  expect_clean_error(import(missing), {"tensor '" + key + "_scale_2' is missing"});
  const auto dtype = copy("nvfp4-dtype");
  edit_weights(dtype, [&](auto& t) {
    for (auto& [name, v] : t) {
      if (name == key + "_scale") v = Tensor::empty_cpu(DType::kF32, v.shape());
    }
  });
  expect_clean_error(import(dtype),
                     {"NVFP4 tensor '" + key + "_scale'", "is F32, expected F8_E4M3"});
  const auto shape = copy("nvfp4-shape");
  edit_weights(shape, [&](auto& t) {
    for (auto& [name, v] : t) {
      if (name == key + "_scale") v = Tensor::empty_cpu(DType::kF8E4M3, {48, 1});
    }
  });
  expect_clean_error(import(shape), {"tensor '" + key + "_scale'",
                                     "has shape [48, 1], but config.json implies [48, 2]"});
}

// ---- NVFP4 (compressed-tensors nvfp4-pack-quantized) ------------------------------------------

const std::filesystem::path kCtNvfp4 =
    std::filesystem::path(MG_SOURCE_DIR) / "tests/fixtures/hf/mixtral_ct_nvfp4";

TEST(HfCtNvfp4Golden, ImportKeepsCodesAndADividingGlobalScaleForExpertsAndAttention) {
  const proto::Model m = import_hf_checkpoint(kCtNvfp4).model;
  auto find = [&](const std::string& name) -> const proto::TensorInfo* {
    for (const proto::TensorInfo& t : m.tensors()) {
      if (t.name() == name) return &t;
    }
    return nullptr;
  };
  // Experts: w13 [4, 96, 32] as U8 [4, 96, 16]; attention q_proj [32, 32] as U8 [32, 16]
  // (a dense NVFP4 linear); both with compressed-tensors' dividing global scale.
  for (const auto& [name, shape] : std::vector<std::pair<std::string, std::vector<int64_t>>>{
           {"model.layers.0.block_sparse_moe.experts.w13", {4, 96, 16}},
           {"model.layers.1.self_attn.q_proj.weight", {32, 16}}}) {
    SCOPED_TRACE(name);
    const proto::TensorInfo* t = find(name);
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(t->dtype(), proto::U8);
    EXPECT_EQ(std::vector<int64_t>(t->shape().begin(), t->shape().end()), shape);
    EXPECT_EQ(t->quantization().element(), proto::QUANT_ELEMENT_FP4_E2M1);
    EXPECT_EQ(t->quantization().group_cols(), 16);
    EXPECT_TRUE(t->quantization().global_scale_divides());
    const proto::TensorInfo* g = find(t->quantization().global_scale());
    ASSERT_NE(g, nullptr);
    EXPECT_EQ(g->dtype(), proto::F32);
  }
  // lm_head and the routers are in `ignore`: float.
  ASSERT_NE(find("lm_head.weight"), nullptr);
  EXPECT_FALSE(find("lm_head.weight")->has_quantization());
}

TEST(HfCtNvfp4Golden, LogitsAndGreedyIdsMatchTheDequantizedModel) {
  const nlohmann::json ref = load_json_file(kCtNvfp4 / "reference.json");
  const std::vector<int32_t> prompt = ids(ref, "prompt_ids"), greedy = ids(ref, "greedy_ids");
  auto session = open_imported(kCtNvfp4);
  expect_logits_match(session->forward(prompt, positions(prompt.size())),
                      read_npy(kCtNvfp4 / "logits.npy"), "compressed-tensors nvfp4 prompt");
  auto again = open_imported(kCtNvfp4);
  GenerateOptions gen;
  gen.max_new_tokens = static_cast<int>(greedy.size());
  gen.stop_at_eos = false;
  EXPECT_EQ(again->generate(prompt, gen).tokens, greedy);
}

TEST(HfCtNvfp4Golden, ReadingTheGlobalScaleAsAMultiplierWouldBeWrong) {
  // The same checkpoint with its global scales inverted and read the ModelOpt way gives the same
  // logits only when the direction is honoured: flip global_scale_divides in the imported graph
  // and the logits move far from the golden.
  HfImportResult imported = import_hf_checkpoint(kCtNvfp4);
  for (proto::TensorInfo& t : *imported.model.mutable_tensors()) {
    if (t.has_quantization() && t.quantization().global_scale_divides()) {
      t.mutable_quantization()->set_global_scale_divides(false);
    }
  }
  const nlohmann::json ref = load_json_file(kCtNvfp4 / "reference.json");
  const std::vector<int32_t> prompt = ids(ref, "prompt_ids");
  auto session = open_model(std::move(imported.model), kCtNvfp4);
  const Tensor logits = session->forward(prompt, positions(prompt.size()));
  EXPECT_GT(testing::normalized_error(testing::span_of(logits),
                                      testing::span_of(read_npy(kCtNvfp4 / "logits.npy"))),
            0.1);
}

TEST(HfBadCtNvfp4Checkpoint, MissingGlobalScaleAndWrongStrategy) {
  const std::string module = "model.layers.0.self_attn.o_proj";
  auto copy = [&](const std::string& name) {
    const auto dir = testing::temp_dir(name);
    for (const char* f : {"config.json", "model.safetensors"}) {
      std::filesystem::copy_file(kCtNvfp4 / f, dir / f,
                                 std::filesystem::copy_options::overwrite_existing);
    }
    return dir;
  };
  const auto missing = copy("ct-nvfp4-missing");
  edit_weights(missing, [&](auto& t) {
    std::erase_if(t, [&](const auto& nt) { return nt.first == module + ".weight_global_scale"; });
  });
  expect_clean_error(import(missing), {"tensor '" + module + ".weight_global_scale' is missing"});
  const auto strategy = copy("ct-nvfp4-strategy");
  nlohmann::json config = load_json_file(strategy / "config.json");
  config["quantization_config"]["config_groups"]["group_0"]["weights"]["strategy"] = "group";
  std::ofstream(strategy / "config.json", std::ios::trunc) << config.dump(2);
  expect_clean_error(import(strategy), {"strategy 'group' are not supported"});
}

}  // namespace
}  // namespace mg
