// The quantized whole-model benchmark path (tools/bench/quant_e2e_run.sh runs it at full size on a
// GPU): make-model --graph-only --quant, then bench e2e --random-weights, which makes the codes and
// scales, runs the model and prints the weight-bandwidth floor with the quantized bytes in it.
#include <fstream>
#include <sstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/testing/command.h"
#include "tests/testing/test_util.h"

namespace mg {
namespace {

using testing::CommandResult;
using ::testing::HasSubstr;
using ::testing::Not;
using testing::run_moegraph;

std::string make_graph(const std::string& tag, const std::vector<std::string>& flags) {
  const auto dir = testing::temp_dir(tag);
  std::vector<std::string> args = {"make-model", "--graph-only", "--out", dir.string(), "--layers",
                                   "2",          "--vocab",      "512"};
  args.insert(args.end(), flags.begin(), flags.end());
  const CommandResult made = run_moegraph(args);
  EXPECT_EQ(made.exit_code, 0) << made.err;
  return (dir / "model.pbtxt").string();
}

CommandResult bench(const std::string& graph) {
  return run_moegraph({"bench", "e2e", graph, "--device", "cpu", "--random-weights", "1",
                       "--prompt-tokens", "8", "--decode-tokens", "4", "--repeats", "1"});
}

// The MB printed before `label` in the floor line.
double floor_mb(const std::string& out, const std::string& label) {
  const size_t at = out.find(label);
  EXPECT_NE(at, std::string::npos) << out;
  if (at == std::string::npos) return -1;
  const size_t end = out.rfind(" MB", at);
  const size_t start = out.find_last_of(" (", end - 1) + 1;
  return std::stod(out.substr(start, end - start));
}

TEST(QuantBenchE2e, Int4ExpertsRunWithRandomWeightsAndTheFloorCountsTheirPackedBytes) {
  const std::vector<std::string> shape = {"--family",    "qwen3_moe", "--hidden",  "256",
                                          "--moe-inter", "128",       "--experts", "8",
                                          "--topk",      "2"};
  std::vector<std::string> int4 = shape;
  int4.insert(int4.end(), {"--quant", "int4-g128"});
  const CommandResult q = bench(make_graph("int4", int4));
  ASSERT_EQ(q.exit_code, 0) << q.err;
  EXPECT_THAT(q.out, HasSubstr("random weights"));
  EXPECT_THAT(q.out, HasSubstr("decode: 4 tokens (batch 1)"));
  EXPECT_THAT(q.out, HasSubstr("of the weight-bandwidth floor"));
  EXPECT_THAT(q.out, HasSubstr("prefill floor: "));
  const CommandResult b = bench(make_graph("bf16", shape));
  ASSERT_EQ(b.exit_code, 0) << b.err;
  // Top-2 of 8 experts of 2 layers: 3 x 256 x 128 values each, in the CPU's F32 activations
  // (4 bytes) or INT4 codes with an F32 scale per 128 (0.53125 bytes).
  const double values = 2 * 2 * 3 * 256.0 * 128;
  EXPECT_NEAR(floor_mb(b.out, "MB of routed experts"), values * 4 / 1e6, 1e-3) << b.out;
  EXPECT_NEAR(floor_mb(q.out, "MB of routed experts"), values * 0.53125 / 1e6, 1e-3) << q.out;
  EXPECT_NEAR(floor_mb(q.out, "MB of it quantized"), values * 0.53125 / 1e6, 1e-3) << q.out;
  EXPECT_NEAR(floor_mb(b.out, "MB of it quantized"), 0, 1e-9) << b.out;
  EXPECT_NEAR(floor_mb(q.out, "MB dense"), floor_mb(b.out, "MB dense"), 1e-3);
}

TEST(QuantBenchE2e, GptOssMxfp4WithItsSlidingWindowRuns) {
  const std::string graph = make_graph(
      "mxfp4",
      {"--family", "gpt_oss", "--hidden",         "128", "--moe-inter", "128", "--experts",  "8",
       "--topk",   "4",       "--heads",          "4",   "--kv-heads",  "2",   "--head-dim", "32",
       "--quant",  "mxfp4",   "--sliding-window", "6"});
  std::ifstream in(graph);
  std::stringstream text;
  text << in.rdbuf();
  // Even layers slide over the window set, odd layers attend to everything.
  EXPECT_THAT(text.str(), HasSubstr("sliding_window: 6"));
  EXPECT_THAT(text.str(), Not(HasSubstr("sliding_window: 4")));
  const CommandResult r = bench(graph);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("of the weight-bandwidth floor"));
  EXPECT_GT(floor_mb(r.out, "MB of it quantized"), 0) << r.out;
}

}  // namespace
}  // namespace mg
