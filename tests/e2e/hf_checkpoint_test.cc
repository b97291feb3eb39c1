// Hugging Face checkpoint folders in their variants and their failures. Each case copies a
// fixture of tests/fixtures/hf to a temp folder and changes one thing:
//  - variants that must give the fixture's golden logits: sharded weights with an index, bf16
//    weights, the multimodal Llama-4 wrapper (text_config, language_model. prefix), legacy RoPE
//    keys (rope_theta + rope_scaling), transformers 5.17's in-memory Granite names;
//  - bad checkpoints through the command line: exit code 2 and one line on stderr naming the
//    file, key or tensor - never a crash.
#include <algorithm>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "framework/compile/compiler.h"
#include "framework/core/half.h"
#include "framework/import/hf_importer.h"
#include "framework/io/json.h"
#include "framework/io/npy.h"
#include "framework/io/safetensors.h"
#include "framework/runtime/session.h"
#include "tests/testing/command.h"
#include "tests/testing/test_util.h"

namespace mg {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

const std::filesystem::path kFixtures = std::filesystem::path(MG_SOURCE_DIR) / "tests/fixtures/hf";

// A writable copy of a fixture's config.json, model.safetensors and logits.npy.
std::filesystem::path copy_fixture(const std::string& name, const std::string& family = "mixtral") {
  const auto dir = testing::temp_dir(name);
  for (const char* f : {"config.json", "model.safetensors", "logits.npy"}) {
    std::filesystem::copy_file(kFixtures / family / f, dir / f,
                               std::filesystem::copy_options::overwrite_existing);
  }
  return dir;
}

nlohmann::json read_config(const std::filesystem::path& dir) {
  return load_json_file(dir / "config.json");
}

void write_text(const std::filesystem::path& path, const std::string& text) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

void write_config(const std::filesystem::path& dir, const nlohmann::json& config) {
  write_text(dir / "config.json", config.dump(2));
}

// Rewrites model.safetensors with `edit` applied to its (name, tensor) list.
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

// Splits model.safetensors into two shards plus model.safetensors.index.json.
void shard_weights(const std::filesystem::path& dir) {
  std::vector<std::pair<std::string, Tensor>> first, second;
  nlohmann::json map = nlohmann::json::object();
  {
    auto file = SafetensorsFile::open(dir / "model.safetensors");
    const auto& entries = file->entries();
    for (size_t i = 0; i < entries.size(); ++i) {
      const Tensor src = file->tensor(entries[i]);
      Tensor copy = Tensor::empty_cpu(src.dtype(), src.shape());
      std::memcpy(copy.raw(), src.raw(), src.nbytes());
      const bool in_first = i < entries.size() / 2;
      (in_first ? first : second).emplace_back(entries[i].name, copy);
      map[entries[i].name] =
          in_first ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
    }
  }
  write_safetensors(dir / "model-00001-of-00002.safetensors", first);
  write_safetensors(dir / "model-00002-of-00002.safetensors", second);
  std::filesystem::remove(dir / "model.safetensors");
  write_text(dir / "model.safetensors.index.json",
             nlohmann::json{{"metadata", {{"total_size", 0}}}, {"weight_map", map}}.dump(2));
}

testing::CommandResult import(const std::filesystem::path& dir) {
  return testing::run_moegraph({"import-hf", dir.string(), "-o", (dir / "out").string()});
}

int count_lines(const std::string& s) {
  return static_cast<int>(std::count(s.begin(), s.end(), '\n'));
}

void expect_clean_error(const testing::CommandResult& r,
                        std::initializer_list<std::string> fragments) {
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_THAT(r.err, StartsWith("moegraph: error: "));
  EXPECT_EQ(count_lines(r.err), 1) << r.err;
  for (const std::string& f : fragments) EXPECT_THAT(r.err, HasSubstr(f));
}

// The fixture's prompt (see tools/hf/make_fixtures.py).
const std::vector<int32_t> kPrompt = {1, 17, 42, 5, 99, 23, 64, 8, 77, 3, 120, 56};

// Normalised error of the logits of the imported folder against the fixture's golden logits.
double error_against_golden(const std::filesystem::path& dir) {
  HfImportResult imported = import_hf_checkpoint(dir);
  CompileOptions options;
  options.max_tokens = 64;
  auto session = std::make_unique<Session>(
      compile_model(std::move(imported.model), dir / "model.pbtxt", options), SessionOptions{});
  std::vector<int32_t> positions(kPrompt.size());
  for (size_t i = 0; i < positions.size(); ++i) positions[i] = static_cast<int32_t>(i);
  const Tensor& logits = session->forward(kPrompt, positions);
  const Tensor golden = read_npy(dir / "logits.npy");
  return testing::normalized_error(testing::span_of(logits), testing::span_of(golden));
}

TEST(HfCheckpointVariant, ShardedWeightsGiveTheGoldenLogits) {
  const auto dir = copy_fixture("variant-sharded", "deepseek_v3");
  shard_weights(dir);
  EXPECT_LE(error_against_golden(dir), 1e-4);
}

TEST(HfCheckpointVariant, Bf16WeightsAreConvertedWhenCompiled) {
  // Every tensor rounded to bf16: the import declares BF16 tensors (stacked experts included)
  // and the result stays within bf16 rounding of the fp32 golden.
  const auto dir = copy_fixture("variant-bf16", "qwen3_moe");
  edit_weights(dir, [](auto& tensors) {
    for (auto& [name, t] : tensors) {
      Tensor bf16 = Tensor::empty_cpu(DType::kBF16, t.shape());
      const float* src = t.template data<float>();
      auto* dst = static_cast<uint16_t*>(bf16.raw());
      for (int64_t i = 0; i < t.numel(); ++i) dst[i] = float_to_bf16(src[i]);
      t = bf16;
    }
  });
  const HfImportResult imported = import_hf_checkpoint(dir);
  for (const proto::TensorInfo& t : imported.model.tensors()) {
    EXPECT_EQ(t.dtype(), proto::BF16) << t.name();
  }
  const double err = error_against_golden(dir);
  EXPECT_LE(err, 3e-2);
  EXPECT_GT(err, 1e-5);  // the weights did change
}

TEST(HfCheckpointVariant, MultimodalLlama4WrapperUsesTheTextModel) {
  const auto dir = copy_fixture("variant-llama4", "llama4");
  const nlohmann::json text = read_config(dir);
  write_config(dir, {{"model_type", "llama4"}, {"text_config", text}});
  edit_weights(dir, [](auto& tensors) {
    for (auto& [name, t] : tensors) name = "language_model." + name;
  });
  EXPECT_LE(error_against_golden(dir), 1e-4);
}

TEST(HfCheckpointVariant, LegacyRopeKeys) {
  // transformers < 5 wrote rope_theta + rope_scaling {"type": ...} instead of rope_parameters.
  const auto dir = copy_fixture("variant-rope", "deepseek_v3");
  nlohmann::json config = read_config(dir);
  nlohmann::json rope = config["rope_parameters"];
  config.erase("rope_parameters");
  config["rope_theta"] = rope["rope_theta"];
  rope.erase("rope_theta");
  rope.erase("rope_type");
  rope["type"] = "yarn";
  config["rope_scaling"] = rope;
  write_config(dir, config);
  EXPECT_LE(error_against_golden(dir), 1e-4);
}

TEST(HfCheckpointVariant, GraniteInMemoryNames) {
  const auto dir = copy_fixture("variant-granite", "granitemoe");
  edit_weights(dir, [](auto& tensors) {
    for (auto& [name, t] : tensors) {
      for (auto [from, to] :
           {std::pair<std::string, std::string>{"router.layer.weight", "router.weight"},
            {"input_linear.weight", "experts.gate_up_proj"},
            {"output_linear.weight", "experts.down_proj"}}) {
        const size_t at = name.find(from);
        if (at != std::string::npos) name.replace(at, from.size(), to);
      }
    }
  });
  EXPECT_LE(error_against_golden(dir), 1e-4);
}

TEST(HfBadCheckpoint, GoodCopyImports) {
  const auto dir = copy_fixture("good");
  const auto r = import(dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(std::filesystem::exists(dir / "out/model.pbtxt"));
}

TEST(HfBadCheckpoint, RenamedTensor) {
  const auto dir = copy_fixture("renamed");
  edit_weights(dir, [](auto& tensors) {
    for (auto& [name, t] : tensors) {
      if (name == "model.layers.1.self_attn.k_proj.weight")
        name = "model.layers.1.self_attn.key.weight";
    }
  });
  expect_clean_error(import(dir), {"tensor 'model.layers.1.self_attn.k_proj.weight' is missing",
                                   "model.layers.1.self_attn.key.weight"});
}

TEST(HfBadCheckpoint, MissingExpertTensor) {
  const auto dir = copy_fixture("missing");
  edit_weights(dir, [](auto& tensors) {
    std::erase_if(tensors, [](const auto& nt) {
      return nt.first == "model.layers.0.block_sparse_moe.experts.3.w3.weight";
    });
  });
  expect_clean_error(import(dir),
                     {"tensor 'model.layers.0.block_sparse_moe.experts.3.w3.weight' is missing"});
}

TEST(HfBadCheckpoint, MisShapedTensor) {
  const auto dir = copy_fixture("misshaped");
  edit_weights(dir, [](auto& tensors) {
    for (auto& [name, t] : tensors) {
      if (name == "model.layers.1.block_sparse_moe.experts.0.w2.weight") t = t.reshape({48, 32});
    }
  });
  expect_clean_error(import(dir), {"tensor 'model.layers.1.block_sparse_moe.experts.0.w2.weight'",
                                   "has shape [48, 32], but config.json implies [32, 48]"});
}

TEST(HfBadCheckpoint, QuantizedTensorDtype) {
  const auto dir = copy_fixture("int8");
  edit_weights(dir, [](auto& tensors) {
    for (auto& [name, t] : tensors) {
      if (name == "model.norm.weight") t = Tensor::empty_cpu(DType::kI8, t.shape());
    }
  });
  expect_clean_error(import(dir),
                     {"tensor 'model.norm.weight'", "is I8, expected F32, BF16 or F16"});
}

TEST(HfBadCheckpoint, TruncatedWeightFile) {
  const auto dir = copy_fixture("truncated");
  const auto size = std::filesystem::file_size(dir / "model.safetensors");
  std::filesystem::resize_file(dir / "model.safetensors", size - 1000);
  expect_clean_error(import(dir), {"model.safetensors"});
}

TEST(HfBadCheckpoint, UnsupportedModelType) {
  const auto dir = copy_fixture("model-type");
  nlohmann::json config = read_config(dir);
  config["model_type"] = "jamba";
  write_config(dir, config);
  expect_clean_error(import(dir), {"config.json: model_type 'jamba' is not supported", "mixtral",
                                   "deepseek_v3", "granitemoeshared"});
}

TEST(HfBadCheckpoint, MissingConfigKey) {
  const auto dir = copy_fixture("missing-key");
  nlohmann::json config = read_config(dir);
  config.erase("num_local_experts");
  write_config(dir, config);
  expect_clean_error(import(dir), {"config.json: missing key 'num_local_experts'"});
}

TEST(HfBadCheckpoint, WrongTypedConfigKey) {
  const auto dir = copy_fixture("typed-key");
  nlohmann::json config = read_config(dir);
  config["hidden_size"] = "32";
  write_config(dir, config);
  expect_clean_error(import(dir), {"config.json: key 'hidden_size': expected an integer"});
}

TEST(HfBadCheckpoint, InconsistentConfigValue) {
  const auto dir = copy_fixture("top-k");
  nlohmann::json config = read_config(dir);
  config["num_experts_per_tok"] = 9;
  write_config(dir, config);
  expect_clean_error(import(dir), {"key 'num_experts_per_tok': 9 experts per token"});
}

// Found by fuzz_hf_config: an expert count of 4e10 listed every expert's tensors (a 6 TB vector)
// before finding the first missing one. Every size-like config value has a bound.
TEST(HfBadCheckpoint, HugeSizesAreBoundedBeforeAnythingIsSized) {
  const auto dir = copy_fixture("huge-experts", "olmoe");
  nlohmann::json config = read_config(dir);
  config["num_experts"] = 42949672964;
  write_config(dir, config);
  expect_clean_error(import(dir), {"key 'num_experts': expected a positive integer of at most "
                                   "65536, found 42949672964"});
  config["num_experts"] = 8;
  config["num_hidden_layers"] = int64_t{1} << 40;
  write_config(dir, config);
  expect_clean_error(import(dir), {"key 'num_hidden_layers': expected a positive integer of at "
                                   "most 16777216"});
}

TEST(HfBadCheckpoint, BadJson) {
  const auto dir = copy_fixture("bad-json");
  write_text(dir / "config.json", "{\"model_type\": \"mixtral\",");
  expect_clean_error(import(dir), {"config.json:"});
}

TEST(HfBadCheckpoint, NoConfigOrNoWeights) {
  const auto dir = copy_fixture("no-weights");
  std::filesystem::remove(dir / "model.safetensors");
  expect_clean_error(import(dir), {"no weights: expected model.safetensors or "
                                   "model.safetensors.index.json"});
  std::filesystem::remove(dir / "config.json");
  expect_clean_error(import(dir), {"no config.json in this folder"});
  expect_clean_error(
      testing::run_moegraph({"import-hf", (dir / "absent").string(), "-o", (dir / "out").string()}),
      {"is not a directory"});
}

TEST(HfBadCheckpoint, UnsupportedQuantizationMethod) {
  const auto dir = copy_fixture("bitsandbytes");
  nlohmann::json config = read_config(dir);
  config["quantization_config"] = {{"quant_method", "bitsandbytes"}};
  write_config(dir, config);
  expect_clean_error(import(dir),
                     {"quantization_config", "'quant_method'",
                      "quantized checkpoints of method 'bitsandbytes' are not supported"});
}

TEST(HfBadCheckpoint, ShardedCheckpointImports) {
  const auto dir = copy_fixture("sharded");
  shard_weights(dir);
  const auto r = import(dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::ifstream graph(dir / "out/model.pbtxt");
  const std::string text((std::istreambuf_iterator<char>(graph)), {});
  EXPECT_THAT(text, HasSubstr("../model-00001-of-00002.safetensors"));
  EXPECT_THAT(text, HasSubstr("../model-00002-of-00002.safetensors"));
}

TEST(HfBadCheckpoint, TruncatedShard) {
  const auto dir = copy_fixture("sharded-truncated");
  shard_weights(dir);
  const auto shard = dir / "model-00002-of-00002.safetensors";
  std::filesystem::resize_file(shard, std::filesystem::file_size(shard) / 2);
  expect_clean_error(import(dir), {"model-00002-of-00002.safetensors"});
}

TEST(HfBadCheckpoint, IndexNamesMissingShardOrTensor) {
  const auto dir = copy_fixture("sharded-index");
  shard_weights(dir);
  std::filesystem::remove(dir / "model-00001-of-00002.safetensors");
  expect_clean_error(import(dir), {"weight file 'model-00001-of-00002.safetensors' is missing"});

  const auto dir2 = copy_fixture("sharded-index2");
  shard_weights(dir2);
  nlohmann::json index = load_json_file(dir2 / "model.safetensors.index.json");
  index["weight_map"]["model.norm.weight"] = "model-00001-of-00002.safetensors";
  write_text(dir2 / "model.safetensors.index.json", index.dump());
  expect_clean_error(import(dir2), {"weight_map says tensor 'model.norm.weight' is in "
                                    "'model-00001-of-00002.safetensors', but that shard does not "
                                    "hold it"});
}

// ---- FP8 checkpoints (tests/fixtures/hf/*_fp8*, tools/hf/make_fp8_fixtures.py) ----

// W8A16 logits of the imported folder against the fixture's golden (its own prompt).
double fp8_error_against_golden(const std::filesystem::path& dir, const std::string& fixture) {
  const std::filesystem::path ref_file = kFixtures / fixture / "reference.json";
  std::vector<int32_t> prompt;
  for (int64_t id : json_int_array(load_json_file(ref_file), "prompt_ids", ref_file)) {
    prompt.push_back(static_cast<int32_t>(id));
  }
  HfImportResult imported = import_hf_checkpoint(dir);
  CompileOptions options;
  options.max_tokens = 64;
  options.quantize_activations = false;
  auto session = std::make_unique<Session>(
      compile_model(std::move(imported.model), dir / "model.pbtxt", options), SessionOptions{});
  std::vector<int32_t> positions(prompt.size());
  for (size_t i = 0; i < positions.size(); ++i) positions[i] = static_cast<int32_t>(i);
  const Tensor& logits = session->forward(prompt, positions);
  const Tensor golden = read_npy(dir / "logits.npy");
  return testing::normalized_error(testing::span_of(logits), testing::span_of(golden));
}

// Replaces tensor `key` by a zero tensor of `dtype` [shape] (or removes it when `shape` is
// empty and `remove`).
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

TEST(HfCheckpointVariant, ShardedFp8CheckpointGivesTheGoldenLogits) {
  const auto dir = copy_fixture("variant-fp8-sharded", "deepseek_v3_fp8");
  shard_weights(dir);
  EXPECT_LE(fp8_error_against_golden(dir, "deepseek_v3_fp8"), 1e-4);
}

TEST(HfCheckpointVariant, Fp8ScalesInBf16) {
  // Scales stored in bf16 are accepted (and rounded: the logits move, within bf16 rounding).
  const auto dir = copy_fixture("variant-fp8-bf16-scales", "qwen3_moe_ct_fp8_channel");
  edit_weights(dir, [](auto& tensors) {
    for (auto& [name, t] : tensors) {
      if (!name.ends_with("_scale")) continue;
      Tensor bf16 = Tensor::empty_cpu(DType::kBF16, t.shape());
      const float* src = t.template data<float>();
      auto* dst = static_cast<uint16_t*>(bf16.raw());
      for (int64_t i = 0; i < t.numel(); ++i) dst[i] = float_to_bf16(src[i]);
      t = bf16;
    }
  });
  const double err = fp8_error_against_golden(dir, "qwen3_moe_ct_fp8_channel");
  EXPECT_LE(err, 3e-2);
  EXPECT_GT(err, 1e-6);
}

TEST(HfCheckpointVariant, PerTensorScalesStoredAsScalars) {
  // compressed-tensors writes a per-tensor weight_scale as [1] or as a scalar [].
  const auto dir = copy_fixture("variant-ct-scalar-scales", "qwen3_moe_ct_fp8_tensor");
  edit_weights(dir, [](auto& tensors) {
    for (auto& [name, t] : tensors) {
      if (!name.ends_with("_scale")) continue;
      Tensor scalar = Tensor::empty_cpu(DType::kF32, {});
      std::memcpy(scalar.raw(), t.raw(), sizeof(float));
      t = scalar;
    }
  });
  EXPECT_LE(fp8_error_against_golden(dir, "qwen3_moe_ct_fp8_tensor"), 1e-4);
}

TEST(HfCheckpointVariant, CompressedTensorsBlockScales) {
  // llm-compressor's FP8_BLOCK scheme stores the fp8 method's tensors under compressed-tensors
  // names: `weight_scale` [ceil(out/128), ceil(in/128)], activations per group of 128.
  const auto dir = copy_fixture("variant-ct-block", "qwen3_moe_fp8");
  nlohmann::json config = read_config(dir);
  nlohmann::json ct = load_json_file(kFixtures / "qwen3_moe_ct_fp8_channel" / "config.json");
  nlohmann::json q = ct["quantization_config"];
  nlohmann::json& group = q["config_groups"]["group_0"];
  group["weights"]["strategy"] = "block";
  group["weights"]["block_structure"] = {128, 128};
  group["input_activations"]["strategy"] = "group";
  group["input_activations"]["group_size"] = 128;
  config["quantization_config"] = q;
  write_config(dir, config);
  edit_weights(dir, [](auto& tensors) {
    for (auto& [name, t] : tensors) {
      if (name.ends_with("_scale_inv")) name.resize(name.size() - 4);  // "_scale_inv" -> "_scale"
    }
  });
  const proto::Model m = import_hf_checkpoint(dir).model;
  for (const proto::TensorInfo& t : m.tensors()) {
    if (t.name() != "model.layers.1.mlp.experts.w13") continue;
    EXPECT_EQ(t.quantization().group_rows(), 128);
    EXPECT_EQ(t.quantization().activation_group(), 128);
  }
  EXPECT_LE(fp8_error_against_golden(dir, "qwen3_moe_fp8"), 1e-4);
}

TEST(HfBadFp8Checkpoint, GoodCopiesImport) {
  for (const char* fixture : {"deepseek_v3_fp8", "qwen3_moe_fp8", "qwen3_moe_ct_fp8_channel",
                              "qwen3_moe_ct_fp8_tensor"}) {
    const auto dir = copy_fixture(std::string("good-") + fixture, fixture);
    const testing::CommandResult r = import(dir);
    EXPECT_EQ(r.exit_code, 0) << fixture << ": " << r.err;
  }
}

TEST(HfBadFp8Checkpoint, MissingScale) {
  const auto dir = copy_fixture("fp8-no-scale", "deepseek_v3_fp8");
  replace_tensor(dir, "model.layers.0.self_attn.o_proj.weight_scale_inv", DType::kF32, {}, true);
  expect_clean_error(import(dir),
                     {"tensor 'model.layers.0.self_attn.o_proj.weight' in 'model.safetensors' is "
                      "F8_E4M3, but its scale 'model.layers.0.self_attn.o_proj.weight_scale_inv' "
                      "is missing"});
}

TEST(HfBadFp8Checkpoint, MisShapedScale) {
  // o_proj [144, 256] has [2, 2] blocks of 128.
  const auto dir = copy_fixture("fp8-scale-shape", "deepseek_v3_fp8");
  replace_tensor(dir, "model.layers.0.self_attn.o_proj.weight_scale_inv", DType::kF32, {2, 1});
  expect_clean_error(import(dir), {"scale 'model.layers.0.self_attn.o_proj.weight_scale_inv'",
                                   "has shape [2, 1], but model.layers.0.self_attn.o_proj.weight "
                                   "codes [144, 256] with [128, 128] scales need [2, 2]"});
}

TEST(HfBadFp8Checkpoint, ScaleCountThatDoesNotDivideTheRows) {
  // Per channel: one scale per output row; half as many do not divide the rows.
  const auto dir = copy_fixture("fp8-scale-count", "qwen3_moe_ct_fp8_channel");
  replace_tensor(dir, "model.layers.1.mlp.experts.2.up_proj.weight_scale", DType::kF32, {16, 1});
  expect_clean_error(import(dir), {"scale 'model.layers.1.mlp.experts.2.up_proj.weight_scale'",
                                   "has shape [16, 1]", "need [32, 1]"});
}

TEST(HfBadFp8Checkpoint, ScaleOfTheWrongDtype) {
  const auto dir = copy_fixture("fp8-scale-dtype", "qwen3_moe_fp8");
  replace_tensor(dir, "model.layers.0.self_attn.q_proj.weight_scale_inv", DType::kI8, {1, 2});
  expect_clean_error(import(dir), {"scale 'model.layers.0.self_attn.q_proj.weight_scale_inv'",
                                   "is I8, expected F32, BF16 or F16"});
}

TEST(HfBadFp8Checkpoint, CodesOfTheWrongDtype) {
  const auto dir = copy_fixture("fp8-e5m2", "qwen3_moe_fp8");
  replace_tensor(dir, "model.layers.0.self_attn.q_proj.weight", DType::kF8E5M2, {128, 144});
  expect_clean_error(import(dir), {"tensor 'model.layers.0.self_attn.q_proj.weight'",
                                   "is F8_E5M2, but only F8_E4M3 codes"});
  // A float weight beside a scale: the scale says it should be codes.
  const auto dir2 = copy_fixture("fp8-float-with-scale", "qwen3_moe_fp8");
  replace_tensor(dir2, "model.layers.0.self_attn.q_proj.weight", DType::kF32, {128, 144});
  expect_clean_error(import(dir2), {"tensor 'model.layers.0.self_attn.q_proj.weight'",
                                    "is F32, but only F8_E4M3 codes with a scale "
                                    "'model.layers.0.self_attn.q_proj.weight_scale_inv'"});
}

TEST(HfBadFp8Checkpoint, Fp8WeightsWithoutQuantizationConfig) {
  const auto dir = copy_fixture("fp8-no-config", "qwen3_moe_fp8");
  nlohmann::json config = read_config(dir);
  config.erase("quantization_config");
  write_config(dir, config);
  expect_clean_error(import(dir), {"is F8_E4M3, but config.json has no quantization_config"});
}

TEST(HfBadFp8Checkpoint, UnsupportedFp8Configs) {
  const auto with = [](const std::string& name, const std::string& fixture, const auto& edit) {
    const auto dir = copy_fixture(name, fixture);
    nlohmann::json config = read_config(dir);
    edit(config["quantization_config"]);
    write_config(dir, config);
    return import(dir);
  };
  expect_clean_error(
      with("fp8-fmt", "deepseek_v3_fp8", [](nlohmann::json& q) { q["fmt"] = "e5m2"; }),
      {"'fmt'", "FP8 format 'e5m2' is not supported (only e4m3)"});
  expect_clean_error(with("fp8-static", "deepseek_v3_fp8",
                          [](nlohmann::json& q) { q["activation_scheme"] = "static"; }),
                     {"'activation_scheme'", "'static' activation scales are not supported"});
  expect_clean_error(with("fp8-block-rank", "deepseek_v3_fp8",
                          [](nlohmann::json& q) { q["weight_block_size"] = {128}; }),
                     {"'weight_block_size'", "expected two positive integers"});
  expect_clean_error(with("fp8-block-zero", "deepseek_v3_fp8",
                          [](nlohmann::json& q) {
                            q["weight_block_size"] = {0, 128};
                          }),
                     {"'weight_block_size'", "expected two positive integers"});
  expect_clean_error(with("fp8-block-cols", "deepseek_v3_fp8",
                          [](nlohmann::json& q) {
                            q["weight_block_size"] = {128, 64};
                          }),
                     {"'weight_block_size'", "blocks of 64 columns"});
  expect_clean_error(with("fp8-no-block", "deepseek_v3_fp8",
                          [](nlohmann::json& q) { q.erase("weight_block_size"); }),
                     {"'weight_block_size'", "missing"});
  expect_clean_error(with("ct-static", "qwen3_moe_ct_fp8_channel",
                          [](nlohmann::json& q) {
                            q["config_groups"]["group_0"]["input_activations"]["dynamic"] = false;
                          }),
                     {"'strategy'", "static activation strategy 'token' is not supported"});
  // Static per tensor is supported, but every quantized Linear needs its input_scale.
  expect_clean_error(with("ct-static-no-input-scale", "qwen3_moe_ct_fp8_channel",
                          [](nlohmann::json& q) {
                            auto& in = q["config_groups"]["group_0"]["input_activations"];
                            in["dynamic"] = false;
                            in["strategy"] = "tensor";
                          }),
                     {"static input activations", "input_scale", "is missing"});
  expect_clean_error(
      with("ct-int", "qwen3_moe_ct_fp8_channel",
           [](nlohmann::json& q) { q["config_groups"]["group_0"]["weights"]["type"] = "int"; }),
      {"'num_bits'", "8-bit int weights are not supported"});
  expect_clean_error(with("ct-format", "qwen3_moe_ct_fp8_channel",
                          [](nlohmann::json& q) { q["format"] = "marlin-24"; }),
                     {"'format'", "compressed-tensors format 'marlin-24' is not supported"});
  expect_clean_error(with("ct-groups", "qwen3_moe_ct_fp8_channel",
                          [](nlohmann::json& q) {
                            q["config_groups"]["group_1"] = q["config_groups"]["group_0"];
                          }),
                     {"'config_groups'", "2 groups"});
  expect_clean_error(with("ct-regex", "qwen3_moe_ct_fp8_channel",
                          [](nlohmann::json& q) { q["ignore"].push_back("re:("); }),
                     {"'ignore'", "'(' is not a valid regular expression"});
}

TEST(HfBadFp8Checkpoint, IgnoredModuleWithFp8Codes) {
  const auto dir = copy_fixture("ct-ignored", "qwen3_moe_ct_fp8_channel");
  nlohmann::json config = read_config(dir);
  config["quantization_config"]["ignore"].push_back("re:.*self_attn.o_proj$");
  write_config(dir, config);
  expect_clean_error(import(dir),
                     {"tensor 'model.layers.0.self_attn.o_proj.weight'",
                      "quantization_config.ignore entry 're:.*self_attn.o_proj$' keeps "
                      "module 'model.layers.0.self_attn.o_proj' unquantized"});
  // transformers' modules_to_not_convert: a suffix of the module name matches too.
  const auto dir2 = copy_fixture("fp8-not-convert", "deepseek_v3_fp8");
  config = read_config(dir2);
  config["quantization_config"]["modules_to_not_convert"] = {"lm_head", "kv_b_proj"};
  write_config(dir2, config);
  expect_clean_error(import(dir2), {"modules_to_not_convert entry 'kv_b_proj'"});
}

TEST(HfBadFp8Checkpoint, SplitsOffTheScaleBlocks) {
  // 96-row blocks (scales rewritten to that grid): DeepSeek's kv_a split at row 128 (the latent)
  // and Qwen's w13, whose gate ends at row 128 of an expert, fall inside blocks.
  const auto regrid = [](const std::string& name, const std::string& fixture) {
    const auto dir = copy_fixture(name, fixture);
    nlohmann::json config = read_config(dir);
    config["quantization_config"]["weight_block_size"] = {96, 128};
    write_config(dir, config);
    edit_weights(dir, [](auto& tensors) {
      std::map<std::string, Shape> weights;
      for (auto& [key, t] : tensors) weights[key] = t.shape();
      for (auto& [key, t] : tensors) {
        if (!key.ends_with("_scale_inv")) continue;
        const Shape w = weights.at(key.substr(0, key.size() - 10));
        t = Tensor::empty_cpu(DType::kF32, {(w[0] + 95) / 96, (w[1] + 127) / 128});
        std::fill_n(t.template data<float>(), t.numel(), 1.0f);
      }
    });
    return import(dir);
  };
  expect_clean_error(regrid("fp8-split-mla", "deepseek_v3_fp8"),
                     {"'model.layers.0.self_attn.kv_a_proj_with_mqa.latent.weight' takes rows [0, "
                      "128) of 'model.layers.0.self_attn.kv_a_proj_with_mqa.weight', which do not "
                      "fall on its 96-row FP8 scale blocks"});
  expect_clean_error(regrid("fp8-split-w13", "qwen3_moe_fp8"),
                     {"'model.layers.1.mlp.experts.w13' [4, 256, 144] stacks "
                      "'model.layers.1.mlp.experts.0.gate_proj.weight' as rows [0, 128) of a "
                      "256-row matrix, which do not fall on 96-row FP8 scale blocks"});
}

TEST(HfBadCheckpoint, RunOnABadFolderFailsTheSameWay) {
  const auto dir = copy_fixture("run-bad");
  nlohmann::json config = read_config(dir);
  config.erase("num_attention_heads");
  write_config(dir, config);
  expect_clean_error(testing::run_moegraph({"run", dir.string(), "--max-new-tokens", "1"}),
                     {"config.json: missing key 'num_attention_heads'"});
}

}  // namespace
}  // namespace mg
