// `moegraph run --tp/--dp/--ep` on every MoE family gives the single-rank logits (fp32 rounding):
// rank 0 runs the whole prompt while the other DP ranks run shorter ones (uneven tokens).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "framework/io/npy.h"
#include "tests/testing/command.h"
#include "tests/testing/model_fixture.h"
#include "tests/testing/test_util.h"

namespace mg {
namespace {

using testing::run_moegraph;

class ParallelRun : public ::testing::TestWithParam<std::string> {};

TEST_P(ParallelRun, EveryLayoutMatchesOneRank) {
  const std::string family = GetParam();
  const auto dir = testing::temp_dir("model");
  DecoderSpec spec = testing::small_spec(family);
  spec.layers = 3;
  spec.first_dense_layers = std::min<int64_t>(spec.first_dense_layers, 1);
  const std::string graph = testing::write_model(dir, spec).string();
  const std::string prompt = "3,14,15,92,65,35,89,79,32,38";

  const auto single = dir / "single.npy";
  auto r = run_moegraph({"run", graph, "--prompt-ids", prompt, "--max-new-tokens", "3", "--threads",
                         "1", "--dump-logits", single.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Tensor want = read_npy(single);

  const std::vector<std::vector<std::string>> layouts = {
      {"--dp", "2"},
      {"--tp", "2"},
      {"--dp", "2", "--ep"},
      {"--tp", "2", "--ep"},
      {"--dp", "2", "--ep", "--moe-dispatch", "alltoall"},
      {"--tp", "2", "--dp", "2", "--ep"},
      {"--dp", "4"},
      {"--dp", "4", "--ep", "--moe-dispatch", "alltoall"}};
  for (const auto& layout : layouts) {
    const std::string label = fmt::format("{}", fmt::join(layout, " "));
    const auto out = dir / "parallel.npy";
    std::vector<std::string> args = {
        "run", graph,           "--prompt-ids", prompt, "--max-new-tokens",
        "3",   "--dump-logits", out.string()};
    args.insert(args.end(), layout.begin(), layout.end());
    r = run_moegraph(args);
    ASSERT_EQ(r.exit_code, 0) << label << ": " << r.err;
    const Tensor got = read_npy(out);
    ASSERT_EQ(got.shape(), want.shape()) << label;
    EXPECT_LT(testing::normalized_error(testing::span_of(got), testing::span_of(want)), 2e-6)
        << label;
    // Every DP rank reports its own prompt; rank 0's has all 10 tokens.
    EXPECT_THAT(r.out, ::testing::HasSubstr("prompt ids: 3 14 15 92 65 35 89 79 32 38\n")) << label;
  }
}

INSTANTIATE_TEST_SUITE_P(MoEFamilies, ParallelRun,
                         ::testing::Values("mixtral", "qwen3_moe", "qwen2_moe", "deepseek_v3",
                                           "gpt_oss", "llama4"),
                         [](const auto& info) { return info.param; });

TEST(ParallelRunFlags, AreCheckedBeforeRunning) {
  auto r = run_moegraph({"run", "--ep"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, ::testing::HasSubstr("--ep needs more than one rank"));
  r = run_moegraph({"run", "--dp", "2", "--moe-dispatch", "carrier-pigeon"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, ::testing::HasSubstr("carrier-pigeon"));
  r = run_moegraph({"run", "--tp", "2", "--dp", "2", "--moe-dispatch", "alltoall"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, ::testing::HasSubstr("all"));
}

}  // namespace
}  // namespace mg
