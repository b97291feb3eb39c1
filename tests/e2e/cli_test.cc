// The moegraph command end to end: the bundled model runs, --dump-logits matches the library,
// and every kind of bad input ends in one clear line on stderr and exit code 2.
#include <fstream>
#include <sstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "framework/io/graph_loader.h"
#include "framework/io/npy.h"
#include "framework/runtime/session.h"
#include "tests/testing/command.h"
#include "tests/testing/model_fixture.h"
#include "tests/testing/test_util.h"

namespace mg {
namespace {

using testing::CommandResult;
using ::testing::HasSubstr;
using ::testing::Not;
using testing::run_moegraph;
using ::testing::StartsWith;

int count_lines(const std::string& s) {
  return static_cast<int>(std::count(s.begin(), s.end(), '\n'));
}

// A bad-input run: exit code 2, one line on stderr that starts with the program's prefix and
// contains every fragment.
void expect_clean_error(const CommandResult& r, std::initializer_list<std::string> fragments) {
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_THAT(r.err, StartsWith("moegraph: error: "));
  EXPECT_EQ(count_lines(r.err), 1) << r.err;
  for (const std::string& f : fragments) EXPECT_THAT(r.err, HasSubstr(f));
}

TEST(Cli, RunsTheBundledModel) {
  const CommandResult r = run_moegraph({"run", "--max-new-tokens", "5", "--threads", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("generated ids: "));
  EXPECT_THAT(r.out, HasSubstr("tokens/s"));
}

// Several --prompt-ids are generated together (the Engine) and each gets the ids of a run of
// its own; --max-sequences 2 makes the third wait for a slot.
TEST(Cli, SeveralPromptsAreBatchedAndEqualLoneRuns) {
  const std::vector<std::string> prompts = {"1,2,3", "7,8", "9,10,11,12,13"};
  std::vector<std::string> lone;
  for (const std::string& p : prompts) {
    const CommandResult r =
        run_moegraph({"run", "--prompt-ids", p, "--max-new-tokens", "6", "--threads", "2"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const size_t at = r.out.find("generated ids: ");
    ASSERT_NE(at, std::string::npos);
    lone.push_back(r.out.substr(at, r.out.find('\n', at) - at));
  }
  const CommandResult r =
      run_moegraph({"run", "--prompt-ids", prompts[0], "--prompt-ids", prompts[1], "--prompt-ids",
                    prompts[2], "--max-new-tokens", "6", "--threads", "2", "--max-sequences", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("3 sequences, 2 at once"));
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_THAT(r.out, HasSubstr(fmt::format("[{}] {} (", i, lone[i]))) << r.out;
  }
  expect_clean_error(run_moegraph({"run", "--prompt-ids", "1", "--prompt-ids", "2", "--tp", "2"}),
                     {"--tp/--dp/--ep and launched ranks take one prompt"});
}

TEST(Cli, HelpAndVersionExitZero) {
  EXPECT_EQ(run_moegraph({"--help"}).exit_code, 0);
  EXPECT_EQ(run_moegraph({"run", "--help"}).exit_code, 0);
  EXPECT_EQ(run_moegraph({"make-model", "--help"}).exit_code, 0);
  const CommandResult v = run_moegraph({"--version"});
  EXPECT_EQ(v.exit_code, 0);
  EXPECT_THAT(v.out, HasSubstr("moegraph"));
}

TEST(Cli, DumpLogitsMatchesTheLibrary) {
  const auto dir = testing::temp_dir("model");
  const auto graph = testing::write_model(dir, testing::small_spec());
  const auto npy = dir / "logits.npy";
  const CommandResult r = run_moegraph({"run", graph.string(), "--prompt-ids", "4,8,15,16,23,42",
                                        "--max-new-tokens", "2", "--dump-logits", npy.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Tensor dumped = read_npy(npy);
  ASSERT_EQ(dumped.shape(), (Shape{6, 96}));
  auto session = Session::open(graph, {}, {});
  const std::vector<int32_t> ids = {4, 8, 15, 16, 23, 42}, pos = {0, 1, 2, 3, 4, 5};
  EXPECT_LT(testing::normalized_error(testing::span_of(dumped),
                                      testing::span_of(session->forward(ids, pos))),
            1e-6);
}

TEST(Cli, InspectPrintsGraphAndPlan) {
  const CommandResult r = run_moegraph({"inspect", "--plan"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("nodes ("));
  EXPECT_THAT(r.out, HasSubstr("plan for"));
  EXPECT_THAT(r.out, HasSubstr("kernel: "));
  // The fuse-ops pass's q/k/v: one linear node, one output per projection.
  EXPECT_THAT(r.out, HasSubstr("layers.0.attn.q_proj+layers.0.attn.k_proj+layers.0.attn.v_proj"));
  EXPECT_THAT(r.out, HasSubstr("3 outputs ["));
}

// The graph is typed as it runs on the device asked for (no GPU needed without --plan).
TEST(Cli, InspectShowsTheActivationDtypeOfTheDevice) {
  const CommandResult cpu = run_moegraph({"inspect"});
  ASSERT_EQ(cpu.exit_code, 0) << cpu.err;
  EXPECT_THAT(cpu.out, HasSubstr("activations in F32 on cpu"));
  EXPECT_THAT(cpu.out, HasSubstr("output logits F32[T, "));
  const CommandResult cuda = run_moegraph({"inspect", "--device", "cuda"});
  ASSERT_EQ(cuda.exit_code, 0) << cuda.err;
  EXPECT_THAT(cuda.out, HasSubstr("activations in BF16 on cuda:0"));
  EXPECT_THAT(cuda.out, HasSubstr("output logits BF16[T, "));
  EXPECT_THAT(cuda.out, Not(HasSubstr("F32[T")));
  const CommandResult f16 = run_moegraph({"inspect", "--device", "cuda", "--dtype", "f16"});
  ASSERT_EQ(f16.exit_code, 0) << f16.err;
  EXPECT_THAT(f16.out, HasSubstr("output logits F16[T, "));
}

// models/README.md records the commands; the committed files must be what they write.
void expect_reproduces(const std::string& bundled_name, const std::vector<std::string>& args) {
  const auto dir = testing::temp_dir("remade-" + bundled_name);
  std::vector<std::string> cmd = {"make-model", "--out", dir.string()};
  cmd.insert(cmd.end(), args.begin(), args.end());
  const CommandResult r = run_moegraph(cmd);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::filesystem::path bundled =
      std::filesystem::path(MG_SOURCE_DIR) / "models" / bundled_name;
  for (const char* f : {"model.pbtxt", "model.safetensors", "tokenizer.json"}) {
    std::ifstream a(dir / f, std::ios::binary), b(bundled / f, std::ios::binary);
    const std::string sa((std::istreambuf_iterator<char>(a)), {});
    const std::string sb((std::istreambuf_iterator<char>(b)), {});
    EXPECT_FALSE(sa.empty());
    EXPECT_TRUE(sa == sb) << bundled_name << "/" << f << " differs from what make-model writes";
  }
}

TEST(Cli, MakeModelReproducesTheBundledModelsByteForByte) {
  expect_reproduces("tiny-llama", {"--family", "llama", "--seed", "1"});
  expect_reproduces("tiny-moe", {"--family", "deepseek_v3", "--seed", "1", "--layers", "3"});
}

// make-model --graph-only writes no weights; such a graph runs with --random-weights (the
// benchmark path for models too large to write) and is otherwise an error naming the missing file.
// --profile prints one table for the prefill and one for the decode steps.
TEST(Cli, GraphOnlyModelRunsWithRandomWeights) {
  const auto dir = testing::temp_dir("graph-only");
  const CommandResult made = run_moegraph({"make-model", "--family", "qwen3_moe", "--graph-only",
                                           "--out", dir.string(), "--layers", "1"});
  ASSERT_EQ(made.exit_code, 0) << made.err;
  EXPECT_TRUE(std::filesystem::exists(dir / "model.pbtxt"));
  EXPECT_FALSE(std::filesystem::exists(dir / "model.safetensors"));
  const std::string graph = (dir / "model.pbtxt").string();
  expect_clean_error(run_moegraph({"run", graph}), {"model.safetensors", "not found"});

  const CommandResult a = run_moegraph({"run", graph, "--random-weights", "5", "--profile"});
  ASSERT_EQ(a.exit_code, 0) << a.err;
  EXPECT_THAT(a.out, HasSubstr("generated ids: "));
  EXPECT_THAT(a.out, HasSubstr("prefill: 1 forwards, 8 tokens"));
  EXPECT_THAT(a.out, HasSubstr("decode: 15 one-token forwards"));
  EXPECT_THAT(a.out, HasSubstr("forward wall"));
  auto generated = [](const std::string& out) {
    const size_t at = out.find("generated ids: ");
    return out.substr(at, out.find('\n', at) - at);
  };
  // Deterministic: the same seed generates the same tokens, another seed other weights.
  const CommandResult b = run_moegraph({"run", graph, "--random-weights", "5"});
  const CommandResult c = run_moegraph({"run", graph, "--random-weights", "6"});
  ASSERT_EQ(b.exit_code, 0) << b.err;
  ASSERT_EQ(c.exit_code, 0) << c.err;
  EXPECT_EQ(generated(a.out), generated(b.out));
  EXPECT_NE(generated(a.out), generated(c.out));
}

class CliBadInput : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::temp_dir("model");
    graph_ = testing::write_model(dir_, testing::small_spec());
  }
  CommandResult run_edited(const std::function<void(proto::Model&)>& edit) {
    return run_moegraph(
        {"run", testing::edit_graph(graph_, edit).string(), "--max-new-tokens", "1"});
  }
  void write_file(const std::string& name, const std::string& bytes) {
    std::ofstream(dir_ / name, std::ios::binary) << bytes;
  }
  std::string read_file(const std::string& name) {
    std::ifstream in(dir_ / name, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), {});
  }
  std::filesystem::path dir_;
  std::filesystem::path graph_;
};

TEST_F(CliBadInput, UnknownOp) {
  expect_clean_error(
      run_edited([](proto::Model& m) { testing::find_node(m, "layers.0.mlp").set_op("mystery"); }),
      {"edited.pbtxt", "layers.0.mlp", "unknown op 'mystery'"});
}

TEST_F(CliBadInput, MissingTensor) {
  expect_clean_error(run_edited([](proto::Model& m) {
                       testing::find_node(m, "layers.1.mlp").set_inputs(1, "layers.1.mlp.w1");
                     }),
                     {"layers.1.mlp", "'layers.1.mlp.w1'"});
}

TEST_F(CliBadInput, WrongShape) {
  expect_clean_error(run_edited([](proto::Model& m) {
                       for (auto& t : *m.mutable_tensors()) {
                         if (t.name() == "layers.0.mlp.down_proj.weight") t.set_shape(1, 47);
                       }
                     }),
                     {"layers.0.mlp", "47"});
}

TEST_F(CliBadInput, WrongDtype) {
  expect_clean_error(
      run_edited([](proto::Model& m) { m.mutable_inputs(1)->set_dtype(proto::F32); }),
      {"positions"});
}

TEST_F(CliBadInput, Cycle) {
  expect_clean_error(
      run_edited([](proto::Model& m) {
        testing::find_node(m, "layers.0.input_norm").set_inputs(0, "layers.1.ffn_residual.out");
      }),
      {"cycle"});
}

TEST_F(CliBadInput, DuplicateNames) {
  expect_clean_error(run_edited([](proto::Model& m) {
                       testing::find_node(m, "layers.1.attn").set_name("layers.0.attn");
                     }),
                     {"'layers.0.attn' is used twice"});
}

TEST_F(CliBadInput, TruncatedBinaryGraph) {
  const auto pb = testing::edit_graph(
      graph_, [](proto::Model&) {}, "model.pb");
  const std::string bytes = read_file("model.pb");
  write_file("truncated.pb", bytes.substr(0, bytes.size() / 2));
  expect_clean_error(run_moegraph({"run", (dir_ / "truncated.pb").string()}), {"truncated.pb"});
}

TEST_F(CliBadInput, GarbledTextGraph) {
  std::string text = read_file("model.pbtxt");
  text.insert(text.find("nodes {"), "nodes { colour: \"blue\" }\n");
  write_file("garbled.pbtxt", text);
  expect_clean_error(run_moegraph({"run", (dir_ / "garbled.pbtxt").string()}),
                     {"garbled.pbtxt:", "colour"});
}

TEST_F(CliBadInput, TruncatedTextGraph) {
  const std::string text = read_file("model.pbtxt");
  write_file("cut.pbtxt", text.substr(0, text.size() * 2 / 3));
  expect_clean_error(run_moegraph({"run", (dir_ / "cut.pbtxt").string()}), {"cut.pbtxt"});
}

TEST_F(CliBadInput, SafetensorsBadHeader) {
  std::string bytes = read_file("model.safetensors");
  bytes[10] = '#';
  write_file("model.safetensors", bytes);
  expect_clean_error(run_moegraph({"run", graph_.string()}), {"model.safetensors"});
}

TEST_F(CliBadInput, SafetensorsOffsetsPastTheEnd) {
  const std::string bytes = read_file("model.safetensors");
  write_file("model.safetensors", bytes.substr(0, bytes.size() - 100));
  expect_clean_error(run_moegraph({"run", graph_.string()}), {"model.safetensors"});
}

TEST_F(CliBadInput, SafetensorsUnknownDtype) {
  std::string bytes = read_file("model.safetensors");
  const size_t at = bytes.find("\"BF16\"");
  ASSERT_NE(at, std::string::npos);
  bytes.replace(at, 6, "\"BF17\"");
  write_file("model.safetensors", bytes);
  expect_clean_error(run_moegraph({"run", graph_.string()}), {"model.safetensors", "BF17"});
}

TEST_F(CliBadInput, MissingWeightFile) {
  std::filesystem::remove(dir_ / "model.safetensors");
  expect_clean_error(run_moegraph({"run", graph_.string()}), {"model.safetensors", "not found"});
}

TEST_F(CliBadInput, MissingModel) {
  expect_clean_error(run_moegraph({"run", (dir_ / "nope.pbtxt").string()}), {"nope.pbtxt"});
}

TEST_F(CliBadInput, BadFlags) {
  expect_clean_error(run_moegraph({"run", graph_.string(), "--prompt-ids", "1,x,3"}),
                     {"--prompt-ids", "'x'"});
  expect_clean_error(run_moegraph({"run", graph_.string(), "--prompt-ids", "1,500"}),
                     {"500", "vocabulary"});
  expect_clean_error(run_moegraph({"run", graph_.string(), "--device", "tpu"}), {"tpu"});
  // Without CUDA support, or on a machine with fewer GPUs, either error names the device.
  expect_clean_error(run_moegraph({"run", graph_.string(), "--device", "cuda:99"}), {"cuda:99"});
  expect_clean_error(run_moegraph({"run", graph_.string(), "--top-p", "2"}), {"top-p"});
  expect_clean_error(run_moegraph({"run", graph_.string(), "--max-new-tokens", "1000"}),
                     {"maximum sequence length"});
  const CommandResult r = run_moegraph({"run", "--no-such-flag"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--no-such-flag"));
  expect_clean_error(run_moegraph({"make-model", "--family", "gpt5", "--out", dir_.string()}),
                     {"unknown model family 'gpt5'"});
}

// `bench plot` draws the measured H100 results (docs/bench_moe_h100.json) as a PNG; broken
// results are an error naming what is missing. (bench moe itself needs a GPU: tests/cuda.)
TEST(Cli, BenchPlotDrawsThePngOfBenchResults) {
  const auto dir = testing::temp_dir("bench-plot");
  const std::string png = (dir / "bench.png").string();
  const CommandResult ok = run_moegraph(
      {"bench", "plot", std::string(MG_SOURCE_DIR) + "/docs/bench_moe_h100.json", "--png", png});
  ASSERT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_THAT(ok.out, HasSubstr("plot written to"));
  std::ifstream f(png, std::ios::binary);
  char head[8] = {};
  f.read(head, 8);
  EXPECT_EQ(std::string(head + 1, 3), "PNG");

  const std::string bad = (dir / "bad.json").string();
  std::ofstream(bad) << R"({"points": [{"shape": "x", "tokens": 1}]})";
  const CommandResult err = run_moegraph({"bench", "plot", bad, "--png", png});
  EXPECT_EQ(err.exit_code, 2);
  EXPECT_THAT(err.err, HasSubstr("a point lacks shape, backend, tokens or pct_of_floor"));
  const CommandResult missing = run_moegraph({"bench", "plot", "/nonexistent.json", "--png", png});
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_THAT(missing.err, HasSubstr("/nonexistent.json"));
}

// `bench serve` on the CPU (the bundled model): one row per --batch size with positive decode
// tokens/s, latencies and floor; the floor line names the model's MoE layers; a bad batch size
// is a usage error.
TEST(Cli, BenchServeTimesEachBatchSizeOnTheCpu) {
  const CommandResult r = run_moegraph({"bench", "serve", "--device", "cpu", "--batch", "1,3",
                                        "--prompt-tokens", "5", "--decode-tokens", "4"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("greedy"));
  EXPECT_THAT(r.out, ::testing::ContainsRegex("floor: dense weights [0-9.]+ MB, [1-9][0-9]* MoE "
                                              "layers"));
  std::istringstream lines(r.out);
  std::string line;
  std::vector<int> batches;
  while (std::getline(lines, line)) {
    std::istringstream row(line);
    int batch = 0;
    double decode = 0, e2e = 0, step = 0;
    if (!(row >> batch >> decode >> e2e >> step)) continue;
    batches.push_back(batch);
    EXPECT_GT(decode, 0) << line;
    EXPECT_GT(e2e, 0) << line;
    EXPECT_GT(step, 0) << line;
    EXPECT_THAT(line, ::testing::EndsWith("%")) << line;
  }
  EXPECT_EQ(batches, (std::vector<int>{1, 3})) << r.out;
  const CommandResult bad = run_moegraph({"bench", "serve", "--device", "cpu", "--batch", "2,0"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_THAT(bad.err, HasSubstr("--batch: 0 is outside [1, 4096]"));
}

}  // namespace
}  // namespace mg
