// Text on the command line: `run --prompt` encodes with the model's tokenizer.json and streams the
// generated text; generation_config.json's eos ids stop generation; `tokenize` turns stdin lines
// into ids and back; import-hf copies the checkpoint's tokenizer files beside the graph; a bad
// tokenizer file is one line on stderr and exit code 2.
#include <sys/stat.h>

#include <fstream>
#include <sstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "framework/text/tokenizer.h"
#include "tests/testing/command.h"
#include "tests/testing/test_util.h"

namespace mg {
namespace {

using testing::CommandResult;
using ::testing::HasSubstr;
using testing::run_moegraph;
using testing::run_moegraph_with_input;
using ::testing::StartsWith;

const std::filesystem::path kSource(MG_SOURCE_DIR);
const std::filesystem::path kBundled = kSource / "models" / "tiny-moe";
const std::filesystem::path kTokenizers = kSource / "tests" / "fixtures" / "tokenizers";

void write_text(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  ASSERT_TRUE(out.good()) << path;
}

void expect_clean_error(const CommandResult& r, std::initializer_list<std::string> fragments) {
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_THAT(r.err, StartsWith("moegraph: error: "));
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  for (const std::string& f : fragments) EXPECT_THAT(r.err, HasSubstr(f));
}

// The ids after "<label>" on its line of `out`.
std::vector<int32_t> ids_after(const std::string& out, const std::string& label) {
  const size_t at = out.find(label);
  EXPECT_NE(at, std::string::npos) << label << " not in:\n" << out;
  if (at == std::string::npos) return {};
  std::istringstream line(out.substr(at + label.size(), out.find('\n', at) - at - label.size()));
  std::vector<int32_t> ids;
  for (int32_t id; line >> id;) ids.push_back(id);
  return ids;
}

// The bundled model's byte-level tokenizer: the prompt is its bytes, and stdout begins with the
// prompt followed by the text of exactly the generated ids (streamed, special tokens left out).
TEST(TextCli, RunPromptStreamsTheGeneratedText) {
  const std::string prompt = "Hello, wörld";
  const CommandResult r =
      run_moegraph({"run", "--prompt", prompt, "--max-new-tokens", "12", "--threads", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::vector<int32_t> prompt_ids = ids_after(r.out, "prompt ids: ");
  EXPECT_EQ(prompt_ids,
            (std::vector<int32_t>{72, 101, 108, 108, 111, 44, 32, 119, 195, 182, 114, 108, 100}));
  const std::vector<int32_t> generated = ids_after(r.out, "generated ids: ");
  ASSERT_EQ(generated.size(), 12u);
  const auto tokenizer = text::Tokenizer::load(kBundled / "tokenizer.json");
  const std::string text = r.out.substr(0, r.out.find("\nmodel: "));
  EXPECT_EQ(text, prompt + tokenizer->decode(generated, true));

  // The same prompt as ids generates the same tokens (greedy).
  const CommandResult by_ids =
      run_moegraph({"run", "--prompt-ids", "72,101,108,108,111,44,32,119,195,182,114,108,100",
                    "--max-new-tokens", "12", "--threads", "2"});
  ASSERT_EQ(by_ids.exit_code, 0) << by_ids.err;
  EXPECT_EQ(ids_after(by_ids.out, "generated ids: "), generated);
}

// generation_config.json beside the graph: each of its eos ids ends generation (a list here;
// the graph's own eos is -1).
TEST(TextCli, GenerationConfigEosIdsStopGeneration) {
  const auto dir = testing::temp_dir("eos-model");
  for (const char* f : {"model.pbtxt", "model.safetensors", "tokenizer.json"}) {
    std::filesystem::copy_file(kBundled / f, dir / f);
  }
  const std::vector<std::string> args = {"run", dir.string(), "--prompt", "The", "--max-new-tokens",
                                         "16",  "--threads",  "2"};
  const CommandResult full = run_moegraph(args);
  ASSERT_EQ(full.exit_code, 0) << full.err;
  const std::vector<int32_t> generated = ids_after(full.out, "generated ids: ");
  ASSERT_EQ(generated.size(), 16u);
  const int32_t stop = generated[5];
  const size_t first = std::find(generated.begin(), generated.end(), stop) - generated.begin();
  write_text(dir / "generation_config.json",
             fmt::format(R"({{"eos_token_id": [100000, {}], "do_sample": false}})", stop));
  const CommandResult stopped = run_moegraph(args);
  ASSERT_EQ(stopped.exit_code, 0) << stopped.err;
  EXPECT_EQ(ids_after(stopped.out, "generated ids: "),
            std::vector<int32_t>(generated.begin(), generated.begin() + first + 1));

  // A single integer works too; a bad value is one line naming the file and key.
  write_text(dir / "generation_config.json", fmt::format(R"({{"eos_token_id": {}}})", stop));
  const CommandResult single = run_moegraph(args);
  ASSERT_EQ(single.exit_code, 0) << single.err;
  EXPECT_EQ(ids_after(single.out, "generated ids: ").size(), first + 1);
  write_text(dir / "generation_config.json", R"({"eos_token_id": ["x"]})");
  expect_clean_error(run_moegraph(args), {"generation_config.json", "eos_token_id"});
}

// --tokenizer: another tokenizer.json; ids beyond the model's vocabulary are refused naming it.
TEST(TextCli, RunPromptWithAnotherTokenizer) {
  const CommandResult ok = run_moegraph({"run", "--prompt", "abc", "--tokenizer",
                                         (kTokenizers / "bytes256" / "tokenizer.json").string(),
                                         "--max-new-tokens", "2", "--threads", "2"});
  ASSERT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_EQ(ids_after(ok.out, "prompt ids: "), (std::vector<int32_t>{97, 98, 99}));
  expect_clean_error(
      run_moegraph({"run", "--prompt", "<|begin_of_text|>hello", "--tokenizer",
                    (kTokenizers / "llama4" / "tokenizer.json").string(), "--threads", "2"}),
      {"--prompt: token id", "outside the model's vocabulary of 256", "--tokenizer"});
  expect_clean_error(run_moegraph({"run", "--prompt", "x", "--prompt-ids", "1"}),
                     {"--prompt", "excludes", "--prompt-ids"});
  expect_clean_error(run_moegraph({"run", "--prompt", "", "--threads", "2"}),
                     {"--prompt: the text encodes to no tokens"});
}

// tokenize: one line of ids per input line (empty lines included); --decode gives the text back.
TEST(TextCli, TokenizeBothWays) {
  const std::filesystem::path json = kTokenizers / "qwen3_moe" / "tokenizer.json";
  const auto tokenizer = text::Tokenizer::load(json);
  const std::vector<std::string> lines = {"Hello world", "", "  zwei Zeilen über 1234567 😀",
                                          "<|im_start|>user hi<|im_end|>"};
  std::string input;
  std::string expected_ids;
  for (const std::string& l : lines) {
    input += l + "\n";
    expected_ids += fmt::format("{}\n", fmt::join(tokenizer->encode(l), " "));
  }
  const CommandResult enc = run_moegraph_with_input({"tokenize", json.string()}, input);
  ASSERT_EQ(enc.exit_code, 0) << enc.err;
  EXPECT_EQ(enc.out, expected_ids);

  const CommandResult dec =
      run_moegraph_with_input({"tokenize", json.string(), "--decode"}, enc.out);
  ASSERT_EQ(dec.exit_code, 0) << dec.err;
  EXPECT_EQ(dec.out, input);
  const CommandResult skip =
      run_moegraph_with_input({"tokenize", json.string(), "--decode", "--skip-special"},
                              enc.out.substr(enc.out.rfind('\n', enc.out.size() - 2) + 1));
  ASSERT_EQ(skip.exit_code, 0) << skip.err;
  EXPECT_EQ(skip.out, "user hi\n");

  // The folder holding tokenizer.json works as well; the default is the bundled model's.
  const CommandResult dir =
      run_moegraph_with_input({"tokenize", json.parent_path().string(), "--no-special"}, "ab\n");
  ASSERT_EQ(dir.exit_code, 0) << dir.err;
  EXPECT_EQ(dir.out, fmt::format("{}\n", fmt::join(tokenizer->encode("ab", false), " ")));
  const CommandResult bundled = run_moegraph_with_input({"tokenize"}, "hé\n");
  ASSERT_EQ(bundled.exit_code, 0) << bundled.err;
  EXPECT_EQ(bundled.out, "104 195 169\n");
  const CommandResult back = run_moegraph_with_input({"tokenize", "--decode"}, "104, 195, 169\n");
  EXPECT_EQ(back.out, "hé\n");

  expect_clean_error(run_moegraph_with_input({"tokenize", "--decode"}, "1 2 x\n"),
                     {"stdin line 1", "'x' is not a token id"});
  expect_clean_error(run_moegraph_with_input({"tokenize", "--decode"}, "1\n256\n"),
                     {"stdin line 2", "token id 256 is outside the tokenizer's 256 ids"});
}

// Bad tokenizer files: one line naming the file and the field, exit code 2, for tokenize and
// for run --prompt (the file beside the graph).
TEST(TextCli, BadTokenizerFileIsOneLine) {
  const auto dir = testing::temp_dir("bad-tokenizer");
  struct Case {
    std::string json;
    std::vector<std::string> fragments;
  };
  const std::vector<Case> cases = {
      {"{\"model\": ", {"tokenizer.json:1:", "syntax error"}},
      {"[1, 2]", {"tokenizer.json", "expected a JSON object"}},
      {"{\"model\": {\"type\": \"Unigram\", \"vocab\": []}}",
       {"model.type", "'Unigram' is not supported"}},
      {"{\"model\": {\"type\": \"BPE\"}}", {"model.vocab", "missing"}},
      {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}}}", {"model.merges", "missing"}},
      {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [\"a b\"]}}",
       {"model.merges[0]", "'b', which is not in the vocabulary"}},
      {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": -3}}}",
       {"model.vocab", "expected an id"}},
      {"{\"pre_tokenizer\": {\"type\": \"Whitespace\"}, \"model\": {\"type\": \"BPE\", \"vocab\": "
       "{\"a\": 0}, \"merges\": []}}",
       {"pre_tokenizer.type", "'Whitespace' is not supported"}},
      {"{\"normalizer\": {\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"Lowercase\"}]}, "
       "\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}}",
       {"normalizer.normalizers[0].type", "'Lowercase' is not supported"}},
      {"{\"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"Regex\": \"(\"}, \"behavior\": "
       "\"Isolated\"}, \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, "
       "\"merges\": []}}",
       {"pre_tokenizer.pattern", "regex does not compile"}},
      {"{\"truncation\": {\"max_length\": 5}, \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": "
       "0}}}",
       {"truncation", "not supported"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.json);
    write_text(dir / "tokenizer.json", c.json);
    const CommandResult r =
        run_moegraph_with_input({"tokenize", (dir / "tokenizer.json").string()}, "hi\n");
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    for (const std::string& f : c.fragments) EXPECT_THAT(r.err, HasSubstr(f));
  }
  // Beside a graph: run --prompt names the file.
  for (const char* f : {"model.pbtxt", "model.safetensors"}) {
    std::filesystem::copy_file(kBundled / f, dir / f);
  }
  write_text(dir / "tokenizer.json", "{\"model\": {\"type\": \"WordPiece\"}}");
  expect_clean_error(run_moegraph({"run", dir.string(), "--prompt", "hi", "--threads", "2"}),
                     {(dir / "tokenizer.json").string(), "'WordPiece' is not supported"});
  std::filesystem::remove(dir / "tokenizer.json");
  expect_clean_error(run_moegraph({"run", dir.string(), "--prompt", "hi", "--threads", "2"}),
                     {"no tokenizer", "--tokenizer PATH"});
  expect_clean_error(run_moegraph_with_input({"tokenize", "/dev/null"}, "hi\n"),
                     {"/dev/null", "not a regular file"});
  // A FIFO never blocks: as the tokenizer, or as generation_config.json beside the graph.
  const std::filesystem::path fifo = dir / "fifo.json";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0644), 0);
  expect_clean_error(run_moegraph_with_input({"tokenize", fifo.string()}, "hi\n"),
                     {"fifo.json: is a FIFO, not a regular file"});
  std::filesystem::copy_file(kBundled / "tokenizer.json", dir / "tokenizer.json");
  ASSERT_EQ(mkfifo((dir / "generation_config.json").c_str(), 0644), 0);
  expect_clean_error(run_moegraph({"run", dir.string(), "--prompt", "hi", "--threads", "2"}),
                     {"generation_config.json: is a FIFO, not a regular file"});
}

// import-hf copies tokenizer.json and generation_config.json next to model.pbtxt, where run and
// tokenize find them.
TEST(TextCli, ImportHfCopiesTheTokenizerFiles) {
  const auto dir = testing::temp_dir("hf-with-tokenizer");
  const std::filesystem::path hf = dir / "hf";
  std::filesystem::create_directories(hf);
  for (const char* f : {"config.json", "model.safetensors"}) {
    std::filesystem::copy_file(kSource / "tests" / "fixtures" / "hf" / "qwen3_moe" / f, hf / f);
  }
  std::filesystem::copy_file(kTokenizers / "qwen3_moe" / "tokenizer.json", hf / "tokenizer.json");
  write_text(hf / "generation_config.json", R"({"eos_token_id": [1, 2]})");
  const std::filesystem::path out = dir / "out";
  const CommandResult r = run_moegraph({"import-hf", hf.string(), "-o", out.string(), "--quiet"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("copied tokenizer.json, generation_config.json"));
  EXPECT_TRUE(std::filesystem::exists(out / "tokenizer.json"));
  EXPECT_TRUE(std::filesystem::exists(out / "generation_config.json"));
  const CommandResult tok = run_moegraph_with_input({"tokenize", out.string()}, "Hello\n");
  ASSERT_EQ(tok.exit_code, 0) << tok.err;
  const auto tokenizer = text::Tokenizer::load(kTokenizers / "qwen3_moe" / "tokenizer.json");
  EXPECT_EQ(tok.out, fmt::format("{}\n", fmt::join(tokenizer->encode("Hello"), " ")));
  // This tiny checkpoint has 128 ids, the tokenizer ~420: run says so in one line.
  expect_clean_error(
      run_moegraph({"run", out.string(), "--prompt", "<|im_end|>", "--threads", "2"}),
      {"--prompt: token id", "outside the model's vocabulary of 128"});
}

}  // namespace
}  // namespace mg
