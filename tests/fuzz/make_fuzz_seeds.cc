// Writes small valid seed files for the fuzz corpora:
//   make_fuzz_seeds DIR  ->  DIR/safetensors/*, DIR/graph/*, DIR/npy/*, DIR/hf/*, DIR/tokenizer/*,
//                            DIR/chat_template/*, DIR/chat_request/*
// (hf seeds: one per committed HF fixture, in fuzz_hf_config's layout: a family byte, the
// fixture's config.json, and for the first family also a variant with a shard index; tokenizer
// seeds: each committed tokenizer.json fixture with a text, in fuzz_tokenizer's layout; chat
// seeds: each committed family template with each test conversation, and each conversation as a
// chat request body, in fuzz_chat_template's and fuzz_chat_request's layouts)
// Seeds are generated, not committed: the build folder holds them (docs/formats.md, "Fuzzing").
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "framework/core/tensor.h"
#include "framework/io/graph_loader.h"
#include "framework/io/npy.h"
#include "framework/io/safetensors.h"

namespace {

mg::Tensor filled(mg::DType dtype, mg::Shape shape) {
  mg::Tensor t = mg::Tensor::empty_cpu(dtype, std::move(shape));
  auto* p = static_cast<uint8_t*>(t.raw());
  for (size_t i = 0; i < t.nbytes(); ++i) p[i] = static_cast<uint8_t>(17 + 31 * i);
  return t;
}

void write_safetensors_seeds(const std::filesystem::path& dir) {
  using mg::DType;
  mg::write_safetensors(dir / "one.safetensors", {{"w", filled(DType::kF32, {2, 3})}});
  mg::write_safetensors(dir / "mixed.safetensors",
                        {{"layers.0.attn.q.weight", filled(DType::kBF16, {4, 4})},
                         {"layers.0.norm", filled(DType::kF16, {4})},
                         {"ids", filled(DType::kI64, {3})},
                         {"scale", filled(DType::kF64, {})},
                         {"empty", filled(DType::kI32, {0, 5})},
                         {"fp8", filled(DType::kF8E4M3, {2, 2})},
                         {"mask", filled(DType::kBool, {3})}},
                        {{"format", "pt"}});
  mg::write_safetensors(dir / "odd.safetensors",
                        {{"u8", filled(DType::kU8, {3})}, {"f32", filled(DType::kF32, {2})}});
  mg::write_safetensors(dir / "no_tensors.safetensors", {}, {{"k", "v"}});
}

mg::proto::Model sample_model() {
  mg::proto::Model m;
  m.set_name("seed");
  m.set_format_version(mg::kGraphFormatVersion);
  auto* in = m.add_inputs();
  in->set_name("token_ids");
  in->set_dtype(mg::proto::I32);
  in->add_shape(-1);
  auto* out = m.add_outputs();
  out->set_name("logits");
  out->set_dtype(mg::proto::F32);
  out->add_shape(-1);
  out->add_shape(16);
  auto* w = m.add_tensors();
  w->set_name("embed");
  w->set_dtype(mg::proto::BF16);
  w->add_shape(16);
  w->add_shape(8);
  w->set_file("weights.safetensors");
  w->set_key("model.embed_tokens.weight");
  auto* embed = m.add_nodes();
  embed->set_name("embed");
  embed->set_op("embedding");
  embed->add_inputs("token_ids");
  embed->add_inputs("embed");
  embed->add_outputs("h0");
  embed->mutable_embedding()->set_scale(1.5f);
  auto* norm = m.add_nodes();
  norm->set_name("norm");
  norm->set_op("rms_norm");
  norm->add_inputs("h0");
  norm->add_inputs("");
  norm->add_outputs("h1");
  norm->mutable_rms_norm()->set_eps(1e-6f);
  auto* rope = m.add_nodes();
  rope->set_name("rope");
  rope->set_op("rope");
  rope->mutable_rope()->set_num_heads(2);
  rope->mutable_rope()->set_pairing(mg::proto::HALF_SPLIT);
  rope->mutable_rope()->set_theta(10000.0);
  rope->mutable_rope()->mutable_scaling()->set_type(mg::proto::RopeScaling::YARN);
  rope->mutable_rope()->mutable_scaling()->set_beta_fast(32.0);
  auto* attn = m.add_nodes();
  attn->set_name("attn");
  attn->set_op("attention");
  attn->mutable_attention()->set_num_heads(2);
  attn->mutable_attention()->set_scale(0.125f);
  auto* mlp = m.add_nodes();
  mlp->set_name("mlp");
  mlp->set_op("gated_mlp");
  mlp->mutable_gated_mlp()->set_activation(mg::proto::SILU_GATED);
  m.mutable_info()->set_family("llama");
  m.mutable_info()->set_vocab_size(16);
  m.mutable_info()->set_eos_token_id(-1);
  return m;
}

void write_graph_seeds(const std::filesystem::path& dir) {
  const mg::proto::Model model = sample_model();
  mg::save_graph(dir / "model.pbtxt", model);
  mg::save_graph(dir / "model.pb", model);
  mg::proto::Model minimal;
  minimal.set_format_version(mg::kGraphFormatVersion);
  mg::save_graph(dir / "minimal.pbtxt", minimal);
  mg::save_graph(dir / "minimal.pb", minimal);
}

void write_npy_seeds(const std::filesystem::path& dir) {
  using mg::DType;
  mg::write_npy(dir / "f32.npy", filled(DType::kF32, {2, 3}));
  mg::write_npy(dir / "i64.npy", filled(DType::kI64, {4}));
  mg::write_npy(dir / "u8.npy", filled(DType::kU8, {}));
  mg::write_npy(dir / "empty.npy", filled(DType::kF64, {0, 2}));
}

void write_hf_seeds(const std::filesystem::path& dir) {
  const char* env = std::getenv("MG_FUZZ_HF_FIXTURES");  // as fuzz_hf_config reads it
  const std::filesystem::path fixtures =
      env ? std::filesystem::path(env) : std::filesystem::path(MG_SOURCE_DIR) / "tests/fixtures/hf";
  std::vector<std::filesystem::path> families;
  for (const auto& e : std::filesystem::directory_iterator(fixtures)) {
    if (std::filesystem::exists(e.path() / "model.safetensors")) families.push_back(e.path());
  }
  std::sort(families.begin(), families.end());  // fuzz_hf_config picks by this order
  for (size_t i = 0; i < families.size(); ++i) {
    std::ifstream in(families[i] / "config.json", std::ios::binary);
    std::stringstream config;
    config << in.rdbuf();
    std::string seed(1, static_cast<char>(i));
    seed += config.str();
    std::ofstream(dir / (families[i].filename().string() + ".seed"), std::ios::binary) << seed;
    if (i == 0) {
      seed +=
          "\n#index#\n{\"metadata\": {}, \"weight_map\": {\"model.embed_tokens.weight\": "
          "\"model.safetensors\"}}";
      std::ofstream(dir / (families[i].filename().string() + "_index.seed"), std::ios::binary)
          << seed;
    }
  }
}

// Each committed tests/fixtures/tokenizers/<name>/tokenizer.json, then "\n#text#\n" and a text
// with special tokens, digits, spaces and bytes that are not UTF-8.
void write_tokenizer_seeds(const std::filesystem::path& dir) {
  const char* env = std::getenv("MG_FUZZ_TOKENIZER_FIXTURES");
  const std::filesystem::path fixtures =
      env ? std::filesystem::path(env)
          : std::filesystem::path(MG_SOURCE_DIR) / "tests/fixtures/tokenizers";
  for (const auto& e : std::filesystem::directory_iterator(fixtures)) {
    if (!std::filesystem::exists(e.path() / "tokenizer.json")) continue;
    std::ifstream in(e.path() / "tokenizer.json", std::ios::binary);
    std::stringstream json;
    json << in.rdbuf();
    std::ofstream(dir / (e.path().filename().string() + ".seed"), std::ios::binary)
        << json.str()
        << "\n#text#\n<s>Hello <|endoftext|> w\xC3\xb6rld 1234567\n\n  \t\xff\xe2\x82";
  }
}

std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// tests/fixtures/chat_templates: every family's template with every conversation's messages
// (fuzz_chat_template), and every conversation as a chat request body behind each family byte
// (fuzz_chat_request; even bytes parse it as a chat request).
void write_chat_seeds(const std::filesystem::path& template_dir,
                      const std::filesystem::path& request_dir) {
  using ojson = nlohmann::ordered_json;
  const std::filesystem::path fixtures =
      std::filesystem::path(MG_SOURCE_DIR) / "tests/fixtures/chat_templates";
  const ojson conversations = ojson::parse(read_text(fixtures / "conversations.json"));
  int family_index = 0;
  for (const auto& e : std::filesystem::directory_iterator(fixtures)) {
    if (e.path().extension() != ".jinja") continue;
    const std::string source = read_text(e.path());
    for (size_t i = 0; i < conversations.size(); ++i) {
      std::ofstream(template_dir / fmt::format("{}-{}.seed", e.path().stem().string(), i),
                    std::ios::binary)
          << source << "\n#messages#\n"
          << conversations[i]["messages"].dump();
    }
    ++family_index;
  }
  for (size_t i = 0; i < conversations.size(); ++i) {
    const ojson& c = conversations[i];
    ojson body = {{"model", "m"}, {"messages", c["messages"]}, {"max_tokens", 8}};
    if (c.contains("tools")) body["tools"] = c["tools"];
    if (c.contains("kwargs")) body["chat_template_kwargs"] = c["kwargs"];
    for (int family = 0; family < family_index; family += 2) {
      std::ofstream(request_dir / fmt::format("{}-{}.seed", i, family), std::ios::binary)
          << static_cast<char>(family) << body.dump();
    }
  }
  std::ofstream(request_dir / "completion.seed", std::ios::binary)
      << '\x01' << R"({"model": "m", "prompt": [1, 2, 3], "max_tokens": 4, "stop": ["x"]})";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  const std::filesystem::path root = argv[1];
  for (const char* sub :
       {"safetensors", "graph", "npy", "hf", "tokenizer", "chat_template", "chat_request"}) {
    std::filesystem::create_directories(root / sub);
  }
  write_safetensors_seeds(root / "safetensors");
  write_graph_seeds(root / "graph");
  write_npy_seeds(root / "npy");
  write_hf_seeds(root / "hf");
  write_tokenizer_seeds(root / "tokenizer");
  write_chat_seeds(root / "chat_template", root / "chat_request");
  std::printf("seeds written under %s\n", root.c_str());
  return 0;
}
