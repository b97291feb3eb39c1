// Parity with Hugging Face `tokenizers`: every committed tokenizer.json under
// tests/fixtures/tokenizers/ (one per imported family, trained small by
// tools/hf/make_tokenizers.py under that family's configuration) must reproduce, on every corpus
// entry, exactly the ids (with and without special tokens), the decoded text (with and without
// skip_special_tokens) and the DecodeStream chunks that `tokenizers` wrote to expected.json.
#include <filesystem>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "framework/io/json.h"
#include "framework/text/tokenizer.h"
#include "framework/text/utf8.h"

namespace mg::text {
namespace {

const std::filesystem::path kFixtures =
    std::filesystem::path(MG_SOURCE_DIR) / "tests" / "fixtures" / "tokenizers";

// Every family the importer supports has a file here (docs/tokenizer.md).
const char* const kFamilies[] = {
    "qwen3_moe",  "deepseek_v2", "deepseek_v3",       "gpt_oss",  "llama4",      "olmoe",
    "granitemoe", "mixtral",     "mixtral_metaspace", "bytes256", "behaviors_a", "behaviors_b"};

std::string from_hex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    out += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
  }
  return out;
}

std::vector<int32_t> ids_of(const nlohmann::json& j) {
  return j.get<std::vector<int32_t>>();
}

// The chunks DecodeStream returns for `ids`, in expected.json's form: a string, null, or
// {"error": "invalid_prefix"}.
nlohmann::json stream_of(const Tokenizer& t, const std::vector<int32_t>& ids, bool skip) {
  DecodeStream stream(t, skip);
  nlohmann::json out = nlohmann::json::array();
  for (int32_t id : ids) {
    const DecodeStream::Step s = stream.step(id);
    if (s.invalid_prefix) {
      out.push_back({{"error", "invalid_prefix"}});
    } else if (s.text) {
      EXPECT_TRUE(is_valid_utf8(*s.text)) << "a chunk is not whole UTF-8";
      out.push_back(*s.text);
    } else {
      out.push_back(nullptr);
    }
  }
  return out;
}

class TokenizerParity : public ::testing::TestWithParam<const char*> {};

TEST_P(TokenizerParity, IdsDecodedTextAndStreamEqualHuggingFaceTokenizers) {
  const std::filesystem::path dir = kFixtures / GetParam();
  const auto tokenizer = Tokenizer::load(dir / "tokenizer.json");
  const nlohmann::json expected = load_json_file(dir / "expected.json");
  int checked = 0;
  for (const nlohmann::json& c : expected.at("cases")) {
    const std::string input = from_hex(c.at("input_hex").get<std::string>());
    SCOPED_TRACE("input hex " + c.at("input_hex").get<std::string>() + ": \"" + utf8_lossy(input) +
                 "\"");
    const std::vector<int32_t> ids = tokenizer->encode(input, true);
    EXPECT_EQ(ids, ids_of(c.at("ids")));
    EXPECT_EQ(tokenizer->encode(input, false), ids_of(c.at("ids_no_special")));
    const std::vector<int32_t> golden = ids_of(c.at("ids"));
    EXPECT_EQ(tokenizer->decode(golden, false), c.at("decoded").get<std::string>());
    EXPECT_EQ(tokenizer->decode(golden, true), c.at("decoded_skip_special").get<std::string>());
    EXPECT_EQ(stream_of(*tokenizer, golden, false), c.at("stream"));
    EXPECT_EQ(stream_of(*tokenizer, golden, true), c.at("stream_skip_special"));
    ++checked;
  }
  for (const nlohmann::json& c : expected.at("decode_cases")) {
    const std::vector<int32_t> ids = ids_of(c.at("ids"));
    SCOPED_TRACE("decode of " + c.at("ids").dump());
    EXPECT_EQ(tokenizer->decode(ids, false), c.at("decoded").get<std::string>());
    EXPECT_EQ(tokenizer->decode(ids, true), c.at("decoded_skip_special").get<std::string>());
    EXPECT_EQ(stream_of(*tokenizer, ids, false), c.at("stream"));
    ++checked;
  }
  EXPECT_GE(checked, 80) << "expected.json holds fewer cases than the corpus";
}

INSTANTIATE_TEST_SUITE_P(Families, TokenizerParity, ::testing::ValuesIn(kFamilies),
                         [](const auto& info) { return std::string(info.param); });

TEST(TokenizerParityFixtures, EveryCommittedTokenizerIsChecked) {
  std::vector<std::string> dirs;
  for (const auto& e : std::filesystem::directory_iterator(kFixtures)) {
    if (e.is_directory()) dirs.push_back(e.path().filename().string());
  }
  for (const std::string& d : dirs) {
    EXPECT_NE(std::find(std::begin(kFamilies), std::end(kFamilies), d), std::end(kFamilies))
        << d << " is not in kFamilies";
  }
  EXPECT_EQ(dirs.size(), std::size(kFamilies));
}

}  // namespace
}  // namespace mg::text
