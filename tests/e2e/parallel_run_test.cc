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

// GPU ranks are processes (tools/multi_gpu_check.sh runs them where GPUs are lent); what the
// command checks before any GPU is touched is tested here.
TEST(ParallelRunProcesses, BenchE2eRunsTpRanksOnTheCpu) {
  const auto r = run_moegraph({"bench", "e2e", "--device", "cpu", "--tp", "2", "--ep",
                               "--prompt-tokens", "8", "--decode-tokens", "2", "--repeats", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, ::testing::HasSubstr("on 2 cpu ranks (tp=2, ep)"));
  const auto gpu = run_moegraph({"bench", "e2e", "--device", "cuda", "--tp", "2"});
  EXPECT_EQ(gpu.exit_code, 2);
  EXPECT_THAT(gpu.err, ::testing::HasSubstr("--nproc-per-node 2"));
}

TEST(ParallelRunProcesses, GpuRanksNeedALauncher) {
  const auto r = run_moegraph({"run", "--device", "cuda", "--tp", "2"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, ::testing::HasSubstr("start them with --nproc-per-node 2"));
}

TEST(ParallelRunProcesses, BadLaunchEnvironmentIsAnError) {
  auto r = run_moegraph({"run", "--tp", "2"}, {}, {{"RANK", "2"}, {"WORLD_SIZE", "2"}});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, ::testing::HasSubstr("RANK=2 is out of range [0, 1]"));
  r = run_moegraph({"run", "--tp", "2"}, {}, {{"RANK", "0"}, {"WORLD_SIZE", "2"}});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, ::testing::HasSubstr("needs MASTER_ADDR and MASTER_PORT"));
  r = run_moegraph(
      {"run", "--tp", "2"}, {},
      {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "29999"}});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, ::testing::HasSubstr("needs --device cuda"));
}

TEST(ParallelRunProcesses, NprocPerNodeStartsTheRanksAndPropagatesTheirFailure) {
  // Every child fails (CPU ranks are threads, not processes); the launcher returns its status
  // and names the rank.
  auto r = run_moegraph({"--nproc-per-node", "2", "run", "--tp", "2"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, ::testing::HasSubstr("needs --device cuda"));
  EXPECT_THAT(r.err, ::testing::HasSubstr("--nproc-per-node: rank"));
  r = run_moegraph({"run", "--nproc-per-node=0"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, ::testing::HasSubstr("--nproc-per-node: 0 is out of range"));
  r = run_moegraph({"run", "--nproc-per-node", "2"}, {}, {{"RANK", "0"}});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, ::testing::HasSubstr("a launcher started already"));
}

}  // namespace
}  // namespace mg
