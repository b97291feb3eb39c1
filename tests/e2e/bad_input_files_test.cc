// Bad input files and paths through the moegraph command (issue 18, classes 3, 4, 5 and 7): every
// case ends within seconds with exit code 2 and one line on stderr that names the culprit (the
// path, flag, node, field, tensor or config key), and never hangs, replaces what is not a regular
// file, or produces token ids from garbage.
//
//  - inputs that are FIFOs (graph, weights, config.json, shards, the index, a bench JSON): a
//    watchdog opens the FIFO as a writer after a few seconds, so a regression blocks for that long
//    and fails the time check instead of hanging the suite;
//  - output paths that are FIFOs or symlinks (never real device nodes) are refused and left as
//    they were;
//  - a rank failing before the others make a sub-group (run --dp 2) ends at once;
//  - NaN params, NaN weights, an info.vocab_size the graph does not have, a negative output
//    dimension, make-model flags and import-hf config values that make a graph run refuses.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <fstream>
#include <limits>
#include <mutex>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "framework/io/json.h"
#include "tests/testing/command.h"
#include "tests/testing/model_fixture.h"
#include "tests/testing/test_util.h"

namespace mg {
namespace {

using testing::CommandResult;
using ::testing::HasSubstr;
using testing::run_moegraph;
using ::testing::StartsWith;
using Clock = std::chrono::steady_clock;

// What "ends quickly" means here: loading a tiny model takes well under a second.
constexpr auto kQuick = std::chrono::seconds(5);

const std::filesystem::path kFixtures = std::filesystem::path(MG_SOURCE_DIR) / "tests/fixtures/hf";

int count_lines(const std::string& s) {
  return static_cast<int>(std::count(s.begin(), s.end(), '\n'));
}

// Runs moegraph and records how long it took.
struct TimedResult {
  CommandResult r;
  Clock::duration took;
};

TimedResult run_timed(const std::vector<std::string>& args) {
  const auto start = Clock::now();
  CommandResult r = run_moegraph(args);
  return {std::move(r), Clock::now() - start};
}

// Exit code 2, one line on stderr starting with the program's prefix and holding every fragment,
// within kQuick.
void expect_quick_clean_error(const TimedResult& t, std::initializer_list<std::string> fragments) {
  EXPECT_EQ(t.r.exit_code, 2) << t.r.err;
  EXPECT_THAT(t.r.err, StartsWith("moegraph: error: "));
  EXPECT_EQ(count_lines(t.r.err), 1) << t.r.err;
  for (const std::string& f : fragments) EXPECT_THAT(t.r.err, HasSubstr(f));
  EXPECT_LT(t.took, kQuick) << "took "
                            << std::chrono::duration_cast<std::chrono::milliseconds>(t.took).count()
                            << " ms";
}

void make_fifo(const std::filesystem::path& path) {
  std::filesystem::remove(path);
  ASSERT_EQ(::mkfifo(path.c_str(), 0644), 0) << path << ": " << std::strerror(errno);
}

bool is_a_fifo(const std::filesystem::path& path) {
  return std::filesystem::is_fifo(std::filesystem::symlink_status(path));
}

// Unblocks a reader stuck opening `path` (a FIFO) after kQuick, by opening it as a writer (O_RDWR
// never blocks on Linux) and closing again, until destroyed. Without it a regression (a blocking
// open) would hang the test forever; with it, the run ends and fails the time check.
class FifoWatchdog {
 public:
  explicit FifoWatchdog(std::filesystem::path path)
      : path_(std::move(path)), thread_([this] { watch(); }) {}
  ~FifoWatchdog() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

 private:
  void watch() {
    std::unique_lock<std::mutex> lock(mutex_);
    if (cv_.wait_for(lock, kQuick, [&] { return done_; })) return;
    while (!cv_.wait_for(lock, std::chrono::milliseconds(100), [&] { return done_; })) {
      const int fd = ::open(path_.c_str(), O_RDWR | O_NONBLOCK | O_CLOEXEC);
      if (fd >= 0) ::close(fd);
    }
  }

  std::filesystem::path path_;
  std::mutex mutex_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

// A writable copy of an HF fixture.
std::filesystem::path copy_fixture(const std::string& name, const std::string& family) {
  const auto dir = testing::temp_dir(name);
  for (const char* f : {"config.json", "model.safetensors"}) {
    std::filesystem::copy_file(kFixtures / family / f, dir / f,
                               std::filesystem::copy_options::overwrite_existing);
  }
  return dir;
}

void edit_config(const std::filesystem::path& dir,
                 const std::function<void(nlohmann::json&)>& edit) {
  nlohmann::json config = load_json_file(dir / "config.json");
  edit(config);
  std::ofstream(dir / "config.json", std::ios::trunc) << config.dump(2);
}

std::vector<std::string> import_args(const std::filesystem::path& dir) {
  return {"import-hf", dir.string(), "-o", (dir / "out").string(), "--quiet"};
}

std::filesystem::path small_model(const std::string& name) {
  DecoderSpec spec = testing::small_spec();
  spec.weight_dtype = DType::kF32;
  return testing::write_model(testing::temp_dir(name), spec);
}

// ---------------------------------------------------------------------------------------------
// Class 3: inputs that are not regular files.

TEST(BadInputFiles, GraphFileThatIsAFifo) {
  const auto dir = testing::temp_dir("fifo-graph");
  make_fifo(dir / "model.pbtxt");
  FifoWatchdog watchdog(dir / "model.pbtxt");
  expect_quick_clean_error(run_timed({"run", (dir / "model.pbtxt").string()}),
                           {(dir / "model.pbtxt").string(), "is a FIFO, not a regular file"});
  // Through the model folder too.
  expect_quick_clean_error(run_timed({"run", dir.string()}), {"model.pbtxt", "is a FIFO"});
  expect_quick_clean_error(run_timed({"inspect", (dir / "model.pbtxt").string()}),
                           {"model.pbtxt", "is a FIFO"});
}

TEST(BadInputFiles, WeightFileThatIsAFifo) {
  const auto graph = small_model("fifo-weights");
  const auto weights = graph.parent_path() / "model.safetensors";
  make_fifo(weights);
  FifoWatchdog watchdog(weights);
  expect_quick_clean_error(run_timed({"run", graph.string(), "--max-new-tokens", "1"}),
                           {"model.safetensors", "is a FIFO, not a regular file"});
}

TEST(BadInputFiles, HfConfigShardAndIndexThatAreFifos) {
  {
    const auto dir = copy_fixture("fifo-config", "mixtral");
    make_fifo(dir / "config.json");
    FifoWatchdog watchdog(dir / "config.json");
    expect_quick_clean_error(run_timed(import_args(dir)), {"config.json", "is a FIFO"});
    // `run HF_DIR` imports on the fly.
    expect_quick_clean_error(run_timed({"run", dir.string()}), {"config.json", "is a FIFO"});
  }
  {
    const auto dir = copy_fixture("fifo-shard", "mixtral");
    make_fifo(dir / "model.safetensors");
    FifoWatchdog watchdog(dir / "model.safetensors");
    expect_quick_clean_error(run_timed(import_args(dir)), {"model.safetensors", "is a FIFO"});
  }
  {
    const auto dir = copy_fixture("fifo-index", "mixtral");
    make_fifo(dir / "model.safetensors.index.json");
    FifoWatchdog watchdog(dir / "model.safetensors.index.json");
    expect_quick_clean_error(run_timed(import_args(dir)),
                             {"model.safetensors.index.json", "is a FIFO"});
  }
}

TEST(BadInputFiles, BenchJsonThatIsAFifoOrADirectory) {
  const auto dir = testing::temp_dir("fifo-bench-json");
  make_fifo(dir / "bench.json");
  FifoWatchdog watchdog(dir / "bench.json");
  expect_quick_clean_error(run_timed({"bench", "plot", (dir / "bench.json").string(), "--png",
                                      (dir / "x.png").string()}),
                           {"bench.json", "is a FIFO"});
  expect_quick_clean_error(
      run_timed({"bench", "plot", dir.string(), "--png", (dir / "x.png").string()}),
      {dir.string(), "is a directory, not a regular file"});
}

// ---------------------------------------------------------------------------------------------
// Class 4: output paths that are not regular files are refused and left alone.

TEST(BadOutputPaths, DumpLogitsOntoAFifoOrASymlink) {
  const auto graph = small_model("dump-target");
  const auto dir = graph.parent_path();
  make_fifo(dir / "logits.fifo");
  expect_quick_clean_error(
      run_timed({"run", graph.string(), "--dump-logits", (dir / "logits.fifo").string()}),
      {"--dump-logits", (dir / "logits.fifo").string(), "is a FIFO, not a regular file"});
  EXPECT_TRUE(is_a_fifo(dir / "logits.fifo")) << "the FIFO was replaced";

  // A symlink (as root, one to /dev/full was replaced by a regular file): refused, and neither
  // the link nor what it points to changes.
  std::ofstream(dir / "precious.txt") << "keep me\n";
  std::filesystem::create_symlink(dir / "precious.txt", dir / "link.npy");
  expect_quick_clean_error(
      run_timed({"run", graph.string(), "--dump-logits", (dir / "link.npy").string()}),
      {"--dump-logits", "link.npy", "is a symbolic link, not a regular file"});
  EXPECT_TRUE(std::filesystem::is_symlink(dir / "link.npy"));
  std::ifstream in(dir / "precious.txt");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "keep me\n");

  // Multi-rank runs check the path the same way, before any rank starts.
  expect_quick_clean_error(run_timed({"run", graph.string(), "--dp", "2", "--dump-logits",
                                      (dir / "logits.fifo").string()}),
                           {"--dump-logits", "is a FIFO"});
  EXPECT_TRUE(is_a_fifo(dir / "logits.fifo"));

  // A regular file is replaced, and no temporary file is left beside it.
  std::ofstream(dir / "old.npy") << "old";
  const TimedResult ok = run_timed({"run", graph.string(), "--max-new-tokens", "1", "--dump-logits",
                                    (dir / "old.npy").string()});
  ASSERT_EQ(ok.r.exit_code, 0) << ok.r.err;
  EXPECT_GT(std::filesystem::file_size(dir / "old.npy"), 3u);
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    EXPECT_EQ(e.path().string().find(".tmp"), std::string::npos) << e.path();
  }
}

TEST(BadOutputPaths, TraceAndBenchPlotOntoASymlinkOrDirectory) {
  const auto graph = small_model("trace-target");
  const auto dir = graph.parent_path();
  std::ofstream(dir / "precious.txt") << "keep me\n";
  std::filesystem::create_symlink(dir / "precious.txt", dir / "trace.json");
  expect_quick_clean_error(
      run_timed({"run", graph.string(), "--trace", (dir / "trace.json").string()}),
      {"--trace", "trace.json", "is a symbolic link"});
  EXPECT_EQ(std::filesystem::file_size(dir / "precious.txt"), 8u);

  // bench plot: the --png target is checked before the JSON is even read.
  std::filesystem::create_directory(dir / "png-dir");
  expect_quick_clean_error(run_timed({"bench", "plot", (dir / "precious.txt").string(), "--png",
                                      (dir / "png-dir").string()}),
                           {"--png", "png-dir", "is a directory"});
}

TEST(BadOutputPaths, MakeModelAndImportHfIntoFoldersHoldingSpecialFiles) {
  const auto out = testing::temp_dir("make-model-target");
  make_fifo(out / "model.pbtxt");
  expect_quick_clean_error(
      run_timed({"make-model", "--family", "llama", "--out", out.string(), "--graph-only"}),
      {(out / "model.pbtxt").string(), "is a FIFO"});
  EXPECT_TRUE(is_a_fifo(out / "model.pbtxt"));

  // The output folder itself must be a folder.
  make_fifo(out / "not-a-dir");
  expect_quick_clean_error(run_timed({"make-model", "--family", "llama", "--out",
                                      (out / "not-a-dir").string(), "--graph-only"}),
                           {"--out: ", "not-a-dir: is a FIFO, not a directory"});

  const auto dir = copy_fixture("import-target", "mixtral");
  std::ofstream(dir / "file") << "x";
  expect_quick_clean_error(
      run_timed({"import-hf", dir.string(), "-o", (dir / "file").string(), "--quiet"}),
      {"-o: ", "is a regular file, not a directory"});
  std::filesystem::create_directory(dir / "out");
  std::filesystem::create_symlink(dir / "config.json", dir / "out" / "model.pbtxt");
  expect_quick_clean_error(run_timed(import_args(dir)),
                           {(dir / "out" / "model.pbtxt").string(), "is a symbolic link"});
  EXPECT_TRUE(std::filesystem::is_symlink(dir / "out" / "model.pbtxt"));
  EXPECT_EQ(load_json_file(dir / "config.json")["model_type"], "mixtral");
}

// ---------------------------------------------------------------------------------------------
// Class 5: a rank that fails before the others make a sub-group.

TEST(MultiRankFailure, EndsAtOnceEveryTime) {
  // The bundled model has 256 tokens. Rank 0 fails on id 300 while rank 1 may not yet have made
  // the MoE sub-groups; before the fix about half of these runs waited out the 60 s timeout.
  for (int i = 0; i < 20; ++i) {
    const TimedResult t = run_timed(
        {"run", "--dp", "2", "--prompt-ids", "1,300", "--max-new-tokens", "2", "--threads", "2"});
    expect_quick_clean_error(t, {"token id 300"});
    if (t.took >= kQuick || t.r.exit_code != 2) {
      ADD_FAILURE() << "run " << i << " of 20 failed; stopping";
      break;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Class 7: garbage that used to run with exit 0.

TEST(SilentGarbage, AddWithANanScale) {
  const auto graph = small_model("add-nan");
  std::string node_name;
  const auto edited = testing::edit_graph(graph, [&](proto::Model& m) {
    for (proto::Node& n : *m.mutable_nodes()) {
      if (n.op() != "add") continue;
      n.mutable_add()->set_scale(std::numeric_limits<float>::quiet_NaN());
      node_name = n.name();
      break;
    }
  });
  ASSERT_FALSE(node_name.empty());
  expect_quick_clean_error(run_timed({"run", edited.string()}),
                           {"node '" + node_name + "'", "scale must be finite"});
}

TEST(SilentGarbage, NanWeightsAreNeverSampled) {
  const auto graph = small_model("nan-weights");
  const auto weights = graph.parent_path() / "model.safetensors";
  // All-ones bytes are NaN in every float dtype.
  testing::edit_weights(weights, [](const std::string& name, Tensor& t) {
    if (name == "lm_head.weight") std::memset(t.raw(), 0xff, t.nbytes());
  });
  expect_quick_clean_error(run_timed({"run", graph.string()}),
                           {"step 0 produced non-finite logits", "--check-weights"});
  // The scan names the poisoned tensor.
  expect_quick_clean_error(
      run_timed({"run", graph.string(), "--check-weights"}),
      {"--check-weights", "'lm_head.weight'", "model.safetensors", "holds a NaN"});
}

TEST(SilentGarbage, CheckWeightsPassesOnAGoodModel) {
  const auto graph = small_model("good-weights");
  const TimedResult t =
      run_timed({"run", graph.string(), "--check-weights", "--max-new-tokens", "2"});
  ASSERT_EQ(t.r.exit_code, 0) << t.r.err;
  EXPECT_THAT(t.r.out, HasSubstr("weight tensors, all finite"));
  EXPECT_THAT(t.r.out, HasSubstr("generated ids: "));
}

TEST(SilentGarbage, VocabSizeThatTheGraphDoesNotHave) {
  const auto graph = small_model("vocab");
  const auto edited =
      testing::edit_graph(graph, [](proto::Model& m) { m.mutable_info()->set_vocab_size(100); });
  expect_quick_clean_error(run_timed({"run", edited.string(), "--prompt-ids", "97"}),
                           {"info.vocab_size is 100", "'logits'", "96"});
}

TEST(SilentGarbage, NegativeOutputDimension) {
  const auto graph = small_model("neg-dim");
  const auto edited =
      testing::edit_graph(graph, [](proto::Model& m) { m.mutable_outputs(0)->set_shape(0, -5); });
  expect_quick_clean_error(run_timed({"run", edited.string()}),
                           {"graph output 'logits'", "-5", "expected -1 for the token count"});
  const auto input =
      testing::edit_graph(graph, [](proto::Model& m) { m.mutable_inputs(0)->set_shape(0, -2); });
  expect_quick_clean_error(run_timed({"run", input.string()}), {"graph input", "-2"});
}

TEST(SilentGarbage, MakeModelValidatesBeforeWriting) {
  const auto out = testing::temp_dir("make-model-topk");
  expect_quick_clean_error(run_timed({"make-model", "--family", "mixtral", "--out", out.string(),
                                      "--experts", "4", "--topk", "8"}),
                           {"--topk (8)", "--experts (4)"});
  EXPECT_FALSE(std::filesystem::exists(out / "model.pbtxt"));
  EXPECT_FALSE(std::filesystem::exists(out / "model.safetensors"));
  expect_quick_clean_error(run_timed({"make-model", "--family", "deepseek_v3", "--out",
                                      out.string(), "--experts", "6", "--graph-only"}),
                           {"--experts (6)", "groups"});
  expect_quick_clean_error(run_timed({"make-model", "--family", "mixtral", "--out", out.string(),
                                      "--topk", "0", "--graph-only"}),
                           {"--topk", "0"});
  EXPECT_FALSE(std::filesystem::exists(out / "model.pbtxt"));
}

TEST(SilentGarbage, ImportHfValidatesConfigValues) {
  struct Case {
    const char* family;
    std::function<void(nlohmann::json&)> edit;
    std::vector<std::string> fragments;
  };
  const std::vector<Case> cases = {
      {"deepseek_v3",
       [](nlohmann::json& c) { c["routed_scaling_factor"] = -2.5; },
       {"config.json", "routed_scaling_factor", "positive"}},
      {"deepseek_v3",
       [](nlohmann::json& c) { c["rope_parameters"]["factor"] = 0; },
       {"config.json", "factor", "positive"}},
      {"deepseek_v3",
       [](nlohmann::json& c) { c["rope_parameters"]["beta_fast"] = -1; },
       {"config.json", "beta_fast"}},
      {"deepseek_v3",
       [](nlohmann::json& c) { c["rope_parameters"]["mscale"] = 1e300; },
       {"config.json", "mscale"}},
      {"deepseek_v3",
       [](nlohmann::json& c) { c["num_experts_per_tok"] = 16; },
       {"config.json", "num_experts_per_tok", "outside [1, 8]"}},
      {"deepseek_v3",
       [](nlohmann::json& c) {
         c["num_experts_per_tok"] = 3;
         c["topk_group"] = 1;
       },
       {"config.json", "topk_group", "fewer than num_experts_per_tok = 3"}},
      {"mixtral",
       [](nlohmann::json& c) { c["rms_norm_eps"] = 1e300; },
       {"config.json", "rms_norm_eps"}},
      {"mixtral",
       [](nlohmann::json& c) { c["num_local_experts"] = -4; },
       {"config.json", "num_local_experts"}},
      {"llama4", [](nlohmann::json& c) { c["attn_scale"] = 1e300; }, {"config.json", "attn_scale"}},
      {"llama4",
       [](nlohmann::json& c) {
         c["moe_layers"] = {0, 0, 7};
       },
       {"config.json", "moe_layers", "found 0 at position 1"}},
      {"granitemoe",
       [](nlohmann::json& c) { c["residual_multiplier"] = 1e300; },
       {"config.json", "residual_multiplier"}},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(::testing::Message() << "case " << i << " (" << cases[i].family << ")");
    const auto dir = copy_fixture(fmt::format("import-config-{}", i), cases[i].family);
    edit_config(dir, cases[i].edit);
    const TimedResult t = run_timed(import_args(dir));
    EXPECT_EQ(t.r.exit_code, 2) << t.r.err;
    EXPECT_EQ(count_lines(t.r.err), 1) << t.r.err;
    for (const std::string& f : cases[i].fragments) EXPECT_THAT(t.r.err, HasSubstr(f));
    EXPECT_FALSE(std::filesystem::exists(dir / "out" / "model.pbtxt"));
  }
}

}  // namespace
}  // namespace mg
