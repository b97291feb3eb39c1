// Issue 18, classes 1, 2, 6 and 8: sizes, parallelism, allocations and messages. Every bad value
// ends within seconds in exit code 2 and one stderr line that names the flag or field and its
// bound, before anything large is allocated. docs/bad_input.md lists these cases.
//
// The runs are fenced by run_moegraph (an address-space, thread and time limit), so a
// regression (a wrapped size, a thread per rank of --tp 40000) fails here instead of taking the
// machine down; the time limit is tight because a refusal takes milliseconds.
#include <fstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "framework/io/graph_loader.h"
#include "tests/testing/command.h"
#include "tests/testing/test_util.h"

namespace mg {
namespace {

using testing::CommandLimits;
using testing::CommandResult;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

const std::filesystem::path kTinyMoe = std::filesystem::path(MG_SOURCE_DIR) / "models/tiny-moe";

CommandResult run(const std::vector<std::string>& args, const testing::EnvChanges& env = {}) {
  CommandLimits limits;
  limits.timeout_seconds = 60;  // seconds on an idle machine; a loaded CI runner is slower
  return testing::run_moegraph(args, limits, env);
}

// Exit 2, exactly one line on stderr with the program's prefix and every fragment.
void expect_refused(const CommandResult& r, std::initializer_list<std::string> fragments) {
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_THAT(r.err, StartsWith("moegraph: error: "));
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  for (const std::string& f : fragments) EXPECT_THAT(r.err, HasSubstr(f));
  EXPECT_THAT(r.err, Not(HasSubstr("internal error")));
}

std::vector<std::string> run_tiny(std::initializer_list<std::string> flags) {
  std::vector<std::string> args = {"run", kTinyMoe.string(), "--max-new-tokens", "2"};
  args.insert(args.end(), flags);
  return args;
}

// Class 1: sizes that used to wrap (a 64-byte KV cache written past) or reach the allocator.
TEST(BadInputSizes, MaxSeqLenBeyondInt32PositionsIsRefused) {
  expect_refused(run(run_tiny({"--max-seq-len", "144115188075855872"})),
                 {"--max-seq-len", "144115188075855872", "[0, 2147483647]"});
  expect_refused(run(run_tiny({"--max-seq-len", "1000000000000"})),
                 {"--max-seq-len", "[0, 2147483647]"});
  expect_refused(run(run_tiny({"--max-seq-len", "-1"})), {"--max-seq-len", "[0, 2147483647]"});
  expect_refused(run(run_tiny({"--max-seq-len", "1e30"})), {"--max-seq-len", "not an integer"});
}

TEST(BadInputSizes, KvCacheBeyondMemoryIsRefusedNamingMaxSeqLen) {
  // In range, but the KV cache of one layer is F32[2^31 - 1, 2, 16] = 256 GiB: more than this
  // machine's memory or, on a larger one, than the harness's address-space limit.
  expect_refused(run(run_tiny({"--max-seq-len", "2147483647"})),
                 {"KV cache", "max_seq_len", "2147483647"});
}

TEST(BadInputSizes, GraphMaxSeqLenIsCheckedLikeTheFlag) {
  proto::Model model = load_graph(kTinyMoe / "model.pbtxt");
  model.mutable_info()->set_max_seq_len(144115188075855872);
  const auto dir = testing::temp_dir("huge-max-seq-len");
  save_graph(dir / "model.pbtxt", model);
  expect_refused(run({"run", (dir / "model.pbtxt").string(), "--random-weights", "1"}),
                 {"info.max_seq_len", "144115188075855872", "2147483647"});
  // --max-seq-len overrides the graph's value.
  const CommandResult ok = run({"run", (dir / "model.pbtxt").string(), "--random-weights", "1",
                                "--max-seq-len", "64", "--max-new-tokens", "2"});
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
}

TEST(BadInputSizes, MaxTokensAndNewTokensAreBounded) {
  expect_refused(run(run_tiny({"--max-tokens", "144115188075855872"})),
                 {"--max-tokens", "[1, 16777216]"});
  expect_refused(run(run_tiny({"--max-tokens", "0"})), {"--max-tokens", "[1, 16777216]"});
  // In range, but the activation arena for 2^24 tokens is 24 GiB: more than the harness's
  // address-space limit (and this machine's memory, if smaller). An AddressSanitizer build runs
  // without that limit (tests/testing/command.cc), so on a large machine the run would succeed.
#if !defined(__SANITIZE_ADDRESS__)
  expect_refused(run(run_tiny({"--max-tokens", "16777216"})),
                 {"activation arena", "--max-tokens", "16777216"});
#endif
  expect_refused(run({"inspect", kTinyMoe.string(), "--plan", "--max-tokens", "99999999999"}),
                 {"--max-tokens", "[1, 16777216]"});
  expect_refused(run({"run", kTinyMoe.string(), "--max-new-tokens", "100000000000"}),
                 {"--max-new-tokens", "[0, 2147483647]"});
}

// Class 2: parallelism that used to overflow (SIGFPE) or start a thread per rank unbounded.
TEST(BadInputSizes, RanksAreBounded) {
  expect_refused(run(run_tiny({"--tp", "65536", "--dp", "65536"})), {"--tp", "[1, 64]"});
  expect_refused(run(run_tiny({"--tp", "40000"})), {"--tp: 40000 is out of range [1, 64]"});
  expect_refused(run(run_tiny({"--dp", "100"})), {"--dp: 100 is out of range [1, 64]"});
  // Each in range, the product not.
  expect_refused(run(run_tiny({"--tp", "8", "--dp", "16"})), {"--tp 8 x --dp 16", "64 ranks"});
}

TEST(BadInputSizes, ThreadsAreBounded) {
  expect_refused(run(run_tiny({"--threads", "100000"})), {"--threads", "100000", "out of range"});
  expect_refused(run(run_tiny({"--threads", "-2"})), {"--threads", "out of range"});
}

// Class 6: make-model sizes, one by one and as a whole, before anything is made or written.
TEST(BadInputSizes, MakeModelSizesAreBounded) {
  const auto dir = testing::temp_dir("make-model-sizes");
  const std::string out = (dir / "m").string();
  expect_refused(run({"make-model", "--out", out, "--hidden", "1e12"}), {"--hidden", "[1, 65536]"});
  expect_refused(run({"make-model", "--out", out, "--hidden", "1000000000000"}),
                 {"--hidden: 1000000000000 is out of range [1, 65536]"});
  expect_refused(run({"make-model", "--out", out, "--layers", "1000000000"}),
                 {"--layers", "[1, 1024]"});
  expect_refused(run({"make-model", "--out", out, "--vocab", "0"}), {"--vocab", "[1, 16777216]"});
  expect_refused(run({"make-model", "--family", "qwen3_moe", "--out", out, "--experts", "100000"}),
                 {"--experts", "[1, 4096]"});
  expect_refused(run({"make-model", "--out", out, "--inter", "99999999"}), {"--inter"});
  expect_refused(run({"make-model", "--out", out, "--max-seq-len", "3000000000"}),
                 {"--max-seq-len", "2147483647"});
  expect_refused(run({"make-model", "--out", out, "--seed", "-1"}), {"--seed", "not an integer"});
  EXPECT_FALSE(std::filesystem::exists(out));
}

TEST(BadInputSizes, MakeModelChecksTheWeightsBeforeWriting) {
  const auto dir = testing::temp_dir("make-model-total");
  const std::string out = (dir / "m").string();
  // Each flag in range; one tensor (the embedding, BF16[16777216, 65536]) is 2 TiB.
  expect_refused(
      run({"make-model", "--out", out, "--vocab", "16777216", "--hidden", "65536", "--graph-only"}),
      {"make-model", "embed", "1.0 TiB", "--vocab 16777216", "--hidden 65536"});
  // Every tensor under 1 TiB (an expert weight is at most [1024, 2 x 8192, 8192] BF16, 256
  // GiB), the model (about 384 GiB a layer) over 16 TiB.
  expect_refused(
      run({"make-model", "--family", "qwen3_moe", "--out", out, "--graph-only", "--layers", "1024",
           "--experts", "1024", "--hidden", "8192", "--moe-inter", "8192"}),
      {"make-model", "16.0 TiB", "--layers 1024"});
  EXPECT_FALSE(std::filesystem::exists(out));
}

// Class 7's seed case, which is a size-like flag: -1 used to become 2^64 - 1.
TEST(BadInputSizes, NegativeSeedsAreRefused) {
  expect_refused(run(run_tiny({"--seed", "-1"})), {"--seed", "'-1' is not an integer"});
  expect_refused(run(run_tiny({"--random-weights", "-5"})), {"--random-weights"});
}

// Class 8: messages.
TEST(BadInputSizes, RangeErrorsAreOneShortLine) {
  const CommandResult r = run(run_tiny({"--tp", "0"}));
  expect_refused(r, {"--tp: 0 is out of range [1, 64]"});
  EXPECT_LT(r.err.size(), 120u) << r.err;  // once a 300-digit bound
}

TEST(BadInputSizes, BenchMoeWithoutAGpuIsTheUsersEnvironment) {
  // CUDA_VISIBLE_DEVICES="" hides the GPUs of a GPU machine too, so this runs everywhere.
  expect_refused(run({"bench", "moe", "--tokens", "1"}, {{"CUDA_VISIBLE_DEVICES", ""}}),
                 {"bench moe", "CUDA"});
}

TEST(BadInputSizes, MissingTmpdirForAHuggingFaceFolderSaysWhatToDo) {
  const std::string hf = std::string(MG_SOURCE_DIR) + "/tests/fixtures/hf/mixtral";
  expect_refused(run({"run", hf, "--max-new-tokens", "1"}, {{"TMPDIR", "/nonexistent/tmp"}}),
                 {"TMPDIR", "/nonexistent/tmp", "set TMPDIR"});
}

TEST(BadInputSizes, InvalidUtf8InABinaryGraphIsOneLine) {
  proto::Model model = load_graph(kTinyMoe / "model.pbtxt");
  const auto dir = testing::temp_dir("bad-utf8");
  std::string bytes;
  ASSERT_TRUE(model.SerializeToString(&bytes));
  // The model's name is the first string field written; make its first byte invalid UTF-8.
  const size_t at = bytes.find(model.name());
  ASSERT_NE(at, std::string::npos);
  bytes[at] = '\xff';
  std::ofstream(dir / "model.pb", std::ios::binary) << bytes;
  const CommandResult r = run({"inspect", (dir / "model.pb").string()});
  expect_refused(r, {"model.pb"});
  EXPECT_THAT(r.err, Not(HasSubstr("libprotobuf")));
}

}  // namespace
}  // namespace mg
