// Bad and unsupported tokenizer.json files: one mg::Error naming the file and the field, every
// size bounded; and the pieces a hand can check (UTF-8 replacement, BPE merge order, streaming).
#include <string>

#include <gtest/gtest.h>

#include "framework/core/error.h"
#include "framework/text/generation_config.h"
#include "framework/text/tokenizer.h"
#include "framework/text/tokenizer_json.h"
#include "framework/text/utf8.h"
#include "tests/testing/test_util.h"
#include "tests/unit/io/io_test_util.h"

namespace mg::text {
namespace {

using mg::testing::throws_error_with;

// A minimal byte-free BPE over the letters a, b, c with merges "a b" (rank 0) and "ab c".
std::string tiny(const std::string& extra = "", const std::string& model_extra = "") {
  return R"({)" + extra + R"("model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "c": 2, "ab": 3,
    "abc": 4, " ": 5, "<unk>": 6}, "merges": ["a b", "ab c"], "unk_token": "<unk>")" +
         model_extra + "}}";
}

TEST(TokenizerFiles, HandCheckedBpe) {
  const auto t = Tokenizer::parse(tiny(), "t.json");
  // abc: a b -> ab (rank 0), ab c -> abc (rank 1). "x" is not in the vocabulary: <unk>, and
  // without fuse_unk two unknown characters are two unk tokens.
  EXPECT_EQ(t->encode("abc"), (std::vector<int32_t>{4}));
  EXPECT_EQ(t->encode("cab"), (std::vector<int32_t>{2, 3}));
  EXPECT_EQ(t->encode("axyb"), (std::vector<int32_t>{0, 6, 6, 1}));
  // No decoder: tokens joined by spaces, as tokenizers does.
  EXPECT_EQ(t->decode(std::vector<int32_t>{4, 2, 99}), "abc c");
  const auto fused = Tokenizer::parse(tiny("", R"(, "fuse_unk": true)"), "t.json");
  EXPECT_EQ(fused->encode("axyb"), (std::vector<int32_t>{0, 6, 1}));
}

// Added tokens: the leftmost match wins, then the longest at that position (tokenizers'
// leftmost-longest); lstrip/rstrip take the spaces beside a match into it. The file's ids
// (10..13) are not used: as tokenizers, the tokens get the next ids after the 7 vocabulary
// entries, 7..10. (Every value here is what tokenizers 0.23.3 gives for this file.)
TEST(TokenizerFiles, AddedTokensLeftmostLongest) {
  const auto t = Tokenizer::parse(tiny(R"("added_tokens": [
      {"id": 10, "content": "xa", "special": true},
      {"id": 11, "content": "xab", "special": true},
      {"id": 12, "content": "bc", "special": false},
      {"id": 13, "content": "<m>", "special": true, "lstrip": true, "rstrip": true}],)"),
                                  "t.json");
  // "cxabc": at 1 both xa and xab match, xab is longer; bc at 3 overlaps it and loses.
  EXPECT_EQ(t->encode("cxabc"), (std::vector<int32_t>{2, 8, 2}));
  EXPECT_EQ(t->encode("abc"), (std::vector<int32_t>{0, 9}));  // bc at 1 before "abc" merges
  EXPECT_EQ(t->encode("a  <m>  b"), (std::vector<int32_t>{0, 10, 1}));
  EXPECT_EQ(t->encode("a<m>b"), (std::vector<int32_t>{0, 10, 1}));
  EXPECT_EQ(t->decode(std::vector<int32_t>{8, 9}, true), "bc");
  EXPECT_EQ(t->decode(std::vector<int32_t>{11, 12}, true), "");  // no such ids: skipped
  EXPECT_EQ(t->id_bound(), 11);
}

TEST(TokenizerFiles, UnsupportedPartsNameTheField) {
  EXPECT_TRUE(throws_error_with(
      [] {
        Tokenizer::parse(tiny(R"("normalizer": {"type":
      "Lowercase"},)"),
                         "t.json");
      },
      {"t.json: normalizer.type", "'Lowercase' is not supported"}));
  EXPECT_TRUE(throws_error_with(
      [] {
        Tokenizer::parse(tiny(R"("decoder": {"type": "Sequence", "decoders": [{"type": "Fuse"},
            {"type": "WordPiece"}]},)"),
                         "t.json");
      },
      {"t.json: decoder.decoders[1].type", "'WordPiece' is not supported"}));
  EXPECT_TRUE(throws_error_with(
      [] { Tokenizer::parse(tiny(R"("post_processor": {"type": "RobertaProcessing"},)"), "t"); },
      {"post_processor.type", "'RobertaProcessing'"}));
  EXPECT_TRUE(throws_error_with([] { Tokenizer::parse(tiny("", R"(, "dropout": 0.1)"), "t"); },
                                {"model.dropout", "random"}));
  EXPECT_TRUE(throws_error_with(
      [] {
        Tokenizer::parse(tiny(R"("added_tokens": [{"id": 9, "content": "<x>", "single_word":
            true}],)"),
                         "t");
      },
      {"added_tokens[0].single_word", "not supported"}));
  EXPECT_TRUE(throws_error_with(
      [] {
        Tokenizer::parse(tiny(R"("pre_tokenizer": {"type": "Split", "pattern": {"Regex": "a"},
            "behavior": "Sideways"},)"),
                         "t");
      },
      {"pre_tokenizer.behavior", "unknown value 'Sideways'"}));
}

TEST(TokenizerFiles, BadFilesNameTheField) {
  // merges is required (tokenizers: "Missing vocab/merges"); an old file's "#version" line is no
  // merge.
  EXPECT_TRUE(throws_error_with(
      [] { Tokenizer::parse(R"({"model": {"type": "BPE", "vocab": {"a": 0}}})", "t.json"); },
      {"t.json: model.merges", "missing"}));
  const auto versioned = Tokenizer::parse(
      R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2},
          "merges": ["#version: 0.2", "a b"]}})",
      "t.json");
  EXPECT_EQ(versioned->encode("ab"), (std::vector<int32_t>{2}));
  EXPECT_TRUE(throws_error_with([] { Tokenizer::parse("{\"model\": [}", "t.json"); },
                                {"t.json:1:", "syntax error"}));
  EXPECT_TRUE(
      throws_error_with([] { Tokenizer::parse("{}", "t.json"); }, {"t.json: model", "missing"}));
  EXPECT_TRUE(throws_error_with(
      [] {
        Tokenizer::parse(R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 0}}})", "t.json");
      },
      {"model.vocab", "id 0 is given to both"}));
  EXPECT_TRUE(throws_error_with(
      [] {
        Tokenizer::parse(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [["a", "q"]]}})",
                         "t.json");
      },
      {"model.merges[0]", "'q', which is not in the vocabulary"}));
  EXPECT_TRUE(throws_error_with(
      [] {
        Tokenizer::parse(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a"]}})",
                         "t.json");
      },
      {"model.merges[0]", "expected \"a b\""}));
  EXPECT_TRUE(throws_error_with(
      [] {
        Tokenizer::parse(tiny(R"("post_processor": {"type": "TemplateProcessing", "single":
            [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id":
            0}}], "special_tokens": {"<s>": {"id": "<s>", "ids": [77], "tokens": ["<s>"]}}},)"),
                         "t.json");
      },
      {"post_processor", "77 is neither in the vocabulary nor an added token"}));
  EXPECT_TRUE(throws_error_with(
      [] { Tokenizer::parse(R"({"model": {"type": "BPE", "vocab": {"\ud800": 0}}})", "t.json"); },
      {"t.json"}));
}

TEST(TokenizerFiles, SizesAreBounded) {
  // Nesting.
  std::string nested = R"({"type": "NFC"})";
  for (int i = 0; i < kMaxNesting + 2; ++i) {
    nested = R"({"type": "Sequence", "normalizers": [)" + nested + "]}";
  }
  EXPECT_TRUE(throws_error_with(
      [&] { Tokenizer::parse(tiny(R"("normalizer": )" + nested + ","), "t.json"); },
      {"normalizer.normalizers[0]", "nested too deeply"}));
  // One string (token or pattern) of more than 64 KiB.
  const std::string long_pattern(kMaxTokenBytes + 1, 'a');
  EXPECT_TRUE(throws_error_with(
      [&] {
        Tokenizer::parse(tiny(R"("pre_tokenizer": {"type": "Split", "pattern": {"Regex": ")" +
                              long_pattern + R"("}, "behavior": "Isolated"},)"),
                         "t.json");
      },
      {"pre_tokenizer.pattern.Regex", "at most 65536"}));
  // Ids beyond the vocabulary bound.
  EXPECT_TRUE(throws_error_with(
      [] { Tokenizer::parse(R"({"model": {"type": "BPE", "vocab": {"a": 4000000}}})", "t"); },
      {"model.vocab", "expected an id in [0, 4000000)"}));
  // Added tokens: each at most 1 KiB.
  EXPECT_TRUE(throws_error_with(
      [] {
        Tokenizer::parse(tiny(R"("added_tokens": [{"id": 9, "content": ")" +
                              std::string(kMaxAddedTokenBytes + 1, 'q') + R"("}],)"),
                         "t.json");
      },
      {"added_tokens[0].content", "at most 1024"}));
  // Text per encode call.
  const auto t = Tokenizer::parse(tiny(), "t.json");
  const std::string big(kMaxEncodeBytes + 1, 'a');
  EXPECT_TRUE(throws_error_with([&] { t->encode(big); }, {"t.json", "at most 16 MiB per call"}));
  EXPECT_NO_THROW(t->encode(std::string_view(big).substr(0, 1 << 20)));
}

// A pattern that backtracks exponentially ends with an error, not a hang.
TEST(TokenizerFiles, CatastrophicRegexIsAnError) {
  const auto t = Tokenizer::parse(tiny(R"("pre_tokenizer": {"type": "Split", "pattern":
      {"Regex": "(a+)+[bc]"}, "behavior": "Isolated"},)"),
                                  "t.json");
  EXPECT_TRUE(throws_error_with([&] { t->encode(std::string(64, 'a')); },
                                {"pre_tokenizer.pattern", "regex match failed"}));
}

// Python's bytes.decode("utf-8", "replace"): one U+FFFD per maximal ill-formed subpart.
TEST(Utf8, LossyDecodingReplacesMaximalSubparts) {
  const std::string r(kReplacementChar);
  EXPECT_EQ(utf8_lossy("abc"), "abc");
  EXPECT_EQ(utf8_lossy("\xE2\x82"), r);  // truncated 3-byte sequence
  EXPECT_EQ(utf8_lossy("\xE2\x82"
                       "A"),
            r + "A");
  EXPECT_EQ(utf8_lossy("\xC0\xAF"), r + r);                  // overlong: two subparts
  EXPECT_EQ(utf8_lossy("\xED\xA0\x80"), r + r + r);          // surrogate
  EXPECT_EQ(utf8_lossy("\xF4\x90\x80\x80"), r + r + r + r);  // beyond U+10FFFF
  EXPECT_EQ(utf8_lossy("\xF0\x9F\x98"), r);                  // emoji cut short
  EXPECT_EQ(utf8_lossy("\xF0\x9F\x98\x80"), "\xF0\x9F\x98\x80");
}

// The stream never returns half a character: a 4-byte emoji over four byte-level ids comes out
// whole at the fourth.
TEST(DecodeStreamTest, HoldsBackPartialCharacters) {
  // The bundled model's tokenizer: ids 0..255 are the bytes.
  const auto t = Tokenizer::load(std::filesystem::path(MG_SOURCE_DIR) / "models" / "tiny-moe" /
                                 "tokenizer.json");
  DecodeStream stream(*t, false);
  EXPECT_EQ(stream.step('h').text, "h");
  EXPECT_FALSE(stream.step(0xF0).text);
  EXPECT_FALSE(stream.step(0x9F).text);
  EXPECT_FALSE(stream.step(0x98).text);
  EXPECT_EQ(stream.step(0x80).text, "\xF0\x9F\x98\x80");
  EXPECT_EQ(stream.step('!').text, "!");
}

TEST(GenerationConfig, EosIdsAsIntegerOrList) {
  const auto dir = mg::testing::temp_dir("generation-config");
  mg::testing::write_bytes(dir / "a.json", R"({"eos_token_id": 7})");
  EXPECT_EQ(read_generation_eos_ids(dir / "a.json"), (std::vector<int32_t>{7}));
  mg::testing::write_bytes(dir / "b.json", R"({"eos_token_id": [1, 106], "bos_token_id": 2})");
  EXPECT_EQ(read_generation_eos_ids(dir / "b.json"), (std::vector<int32_t>{1, 106}));
  mg::testing::write_bytes(dir / "c.json", R"({"do_sample": true})");
  EXPECT_TRUE(read_generation_eos_ids(dir / "c.json").empty());
  mg::testing::write_bytes(dir / "d.json", R"({"eos_token_id": -1})");
  EXPECT_TRUE(throws_error_with([&] { read_generation_eos_ids(dir / "d.json"); },
                                {"d.json", "eos_token_id"}));
}

}  // namespace
}  // namespace mg::text
