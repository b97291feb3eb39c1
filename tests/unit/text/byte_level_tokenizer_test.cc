// The bundled models' tokenizer.json (byte_level_tokenizer_json) encodes and decodes the parity
// corpus exactly as `tokenizers` does with the bytes256 fixture built the same way in Python.
#include "framework/text/byte_level_tokenizer.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "framework/io/json.h"
#include "framework/text/tokenizer.h"

namespace mg::text {
namespace {

TEST(ByteLevelTokenizer, MatchesTokenizersOnTheCorpus) {
  const auto tokenizer = Tokenizer::parse(byte_level_tokenizer_json(), "bytes256");
  EXPECT_EQ(tokenizer->id_bound(), 256);
  const nlohmann::json expected =
      load_json_file(std::filesystem::path(MG_SOURCE_DIR) / "tests" / "fixtures" / "tokenizers" /
                     "bytes256" / "expected.json");
  int checked = 0;
  for (const nlohmann::json& c : expected.at("cases")) {
    const std::string hex = c.at("input_hex").get<std::string>();
    std::string input;
    for (size_t i = 0; i + 1 < hex.size(); i += 2) {
      input += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
    }
    const std::vector<int32_t> ids = tokenizer->encode(input);
    EXPECT_EQ(ids, c.at("ids").get<std::vector<int32_t>>()) << hex;
    EXPECT_EQ(tokenizer->decode(ids), c.at("decoded").get<std::string>()) << hex;
    ++checked;
  }
  EXPECT_GT(checked, 50);
}

// Valid UTF-8 text is its bytes, one id each.
TEST(ByteLevelTokenizer, TextEncodesToItsBytes) {
  const auto tokenizer = Tokenizer::parse(byte_level_tokenizer_json(), "bytes256");
  EXPECT_EQ(tokenizer->encode("A é"), (std::vector<int32_t>{65, 32, 0xC3, 0xA9}));
  EXPECT_EQ(tokenizer->decode(std::vector<int32_t>{72, 105, 0xE2, 0x82, 0xAC}), "Hi€");
}

}  // namespace
}  // namespace mg::text
