// Hugging Face goldens: every fixture under tests/fixtures/hf (tiny random models saved by
// transformers, see tools/hf/make_fixtures.py) is imported and run on the CPU, and must give
// transformers' outputs:
//   - prompt logits: normalised error <= 1e-4 and the same argmax at every position;
//   - the same logits when the prompt is fed one token at a time (the KV-cache path);
//   - greedy generation of the fixture's token count equals transformers' greedy ids.
// Plus the command line end to end: `import-hf` then `run --dump-logits`, and `run HF_DIR`.
#include <algorithm>
#include <cmath>
#include <cstdlib>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "framework/compile/compiler.h"
#include "framework/import/hf_importer.h"
#include "framework/io/json.h"
#include "framework/io/npy.h"
#include "framework/op/op_registry.h"
#include "framework/runtime/session.h"
#include "tests/testing/command.h"
#include "tests/testing/test_util.h"

namespace mg {
namespace {

using ::testing::HasSubstr;

// MG_HF_FIXTURES points the goldens at another folder of fixtures written by make_fixtures.py
// (e.g. variants built while debugging); the default is the committed set.
std::filesystem::path fixtures_dir() {
  if (const char* env = std::getenv("MG_HF_FIXTURES")) return env;
  return std::filesystem::path(MG_SOURCE_DIR) / "tests/fixtures/hf";
}
const std::filesystem::path kFixtures = fixtures_dir();
constexpr double kMaxNormalizedError = 1e-4;

// The first op of `model` this build does not register, or "".
std::string missing_op(const proto::Model& model) {
  for (const proto::Node& n : model.nodes()) {
    if (OpRegistry::global().find(n.op()) == nullptr) return n.op();
  }
  return "";
}

struct Reference {
  std::vector<int32_t> prompt;
  std::vector<int32_t> greedy;
  Tensor logits;  // F32 [T, vocab]
};

Reference load_reference(const std::filesystem::path& dir) {
  const nlohmann::json ref = load_json_file(dir / "reference.json");
  Reference r;
  for (int64_t id : json_int_array(ref, "prompt_ids", dir / "reference.json")) {
    r.prompt.push_back(static_cast<int32_t>(id));
  }
  for (int64_t id : json_int_array(ref, "greedy_ids", dir / "reference.json")) {
    r.greedy.push_back(static_cast<int32_t>(id));
  }
  r.logits = read_npy(dir / "logits.npy");
  return r;
}

// Index of the largest value of row `t` (lowest index among equal maxima, as torch.argmax).
int64_t argmax_row(const float* logits, int64_t t, int64_t vocab) {
  const float* row = logits + t * vocab;
  return std::max_element(row, row + vocab) - row;
}

std::unique_ptr<Session> open_imported(const std::filesystem::path& hf_dir) {
  HfImportResult imported = import_hf_checkpoint(hf_dir);
  CompileOptions options;
  options.max_tokens = 64;
  std::shared_ptr<const ExecutionPlan> plan =
      compile_model(std::move(imported.model), hf_dir / "model.pbtxt", options);
  SessionOptions session;
  session.threads = 2;
  return std::make_unique<Session>(std::move(plan), session);
}

// "layer 3: normalised error 2e-3" style summary of where two logit matrices differ.
void expect_logits_match(const Tensor& got, const Tensor& expected, const std::string& what) {
  ASSERT_EQ(got.shape(), expected.shape()) << what;
  const double err = testing::normalized_error(testing::span_of(got), testing::span_of(expected));
  EXPECT_LE(err, kMaxNormalizedError) << what << ": normalised error " << err;
  const int64_t tokens = expected.dim(0), vocab = expected.dim(1);
  for (int64_t t = 0; t < tokens; ++t) {
    EXPECT_EQ(argmax_row(got.data<float>(), t, vocab), argmax_row(expected.data<float>(), t, vocab))
        << what << ": argmax differs at position " << t;
  }
  ::testing::Test::RecordProperty(what + "_normalized_error", fmt::format("{:.3g}", err));
}

class HfGolden : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    dir_ = kFixtures / GetParam();
    ASSERT_TRUE(std::filesystem::exists(dir_ / "reference.json"))
        << dir_ << " is missing: run tools/hf/make_fixtures.py";
    const std::string missing = missing_op(import_hf_checkpoint(dir_).model);
    if (!missing.empty()) {
      GTEST_SKIP() << "op '" << missing << "' is not registered in this build yet; the imported "
                   << GetParam() << " graph needs it";
    }
    ref_ = load_reference(dir_);
  }

  std::filesystem::path dir_;
  Reference ref_;
};

TEST_P(HfGolden, PromptLogitsMatchTransformers) {
  auto session = open_imported(dir_);
  std::vector<int32_t> positions(ref_.prompt.size());
  for (size_t i = 0; i < positions.size(); ++i) positions[i] = static_cast<int32_t>(i);
  const Tensor& logits = session->forward(ref_.prompt, positions);
  expect_logits_match(logits, ref_.logits, GetParam() + " prompt");
}

TEST_P(HfGolden, TokenByTokenLogitsMatchTransformers) {
  auto session = open_imported(dir_);
  const int64_t vocab = ref_.logits.dim(1);
  Tensor steps = Tensor::empty_cpu(DType::kF32, ref_.logits.shape());
  for (size_t t = 0; t < ref_.prompt.size(); ++t) {
    const int32_t id = ref_.prompt[t], pos = static_cast<int32_t>(t);
    const Tensor& row = session->forward({&id, 1}, {&pos, 1});
    std::copy_n(row.data<float>(), vocab, steps.data<float>() + t * vocab);
  }
  expect_logits_match(steps, ref_.logits, GetParam() + " token-by-token");
}

TEST_P(HfGolden, GreedyIdsMatchTransformers) {
  auto session = open_imported(dir_);
  GenerateOptions gen;
  gen.max_new_tokens = static_cast<int>(ref_.greedy.size());
  gen.stop_at_eos = false;  // the reference disabled eos too
  const GenerateResult r = session->generate(ref_.prompt, gen);
  EXPECT_EQ(r.tokens, ref_.greedy);
}

std::vector<std::string> fixture_names() {
  return {"mixtral", "qwen2_moe", "qwen3_moe", "olmoe", "deepseek_v2", "deepseek_v2_lite",
          "deepseek_v3", "gpt_oss", "llama4", "granitemoe", "granitemoeshared",
          // rows that are not 16-byte multiples (the CUDA padded / fallback paths)
          "mixtral_odd", "qwen3_moe_odd"};
}

INSTANTIATE_TEST_SUITE_P(Families, HfGolden, ::testing::ValuesIn(fixture_names()),
                         [](const auto& info) { return info.param; });

// The command line: import-hf writes a graph that references the checkpoint's file, and run
// reproduces the golden logits; run also accepts the checkpoint folder itself.
class HfCommandLine : public ::testing::Test {
 protected:
  void SetUp() override {
    if (OpRegistry::global().find("moe") == nullptr) {
      GTEST_SKIP() << "op 'moe' is not registered in this build yet; the fixtures need it";
    }
  }
};

TEST_F(HfCommandLine, ImportThenRunReproducesTheGoldenLogits) {
  const std::filesystem::path hf =
      std::filesystem::path(MG_SOURCE_DIR) / "tests/fixtures/hf/qwen3_moe";
  const Reference ref = load_reference(hf);
  const auto out = testing::temp_dir("imported");
  const testing::CommandResult imported =
      testing::run_moegraph({"import-hf", hf.string(), "-o", out.string()});
  ASSERT_EQ(imported.exit_code, 0) << imported.err;
  EXPECT_THAT(imported.out, HasSubstr("imported qwen3_moe (3 layers"));
  EXPECT_EQ(imported.err, "");  // no progress lines for a small checkpoint on a pipe
  // No weights were written next to the graph.
  EXPECT_FALSE(std::filesystem::exists(out / "model.safetensors"));

  const auto npy = out / "logits.npy";
  const std::string prompt = fmt::format("{}", fmt::join(ref.prompt, ","));
  const testing::CommandResult run = testing::run_moegraph(
      {"run", out.string(), "--prompt-ids", prompt, "--max-new-tokens",
       std::to_string(ref.greedy.size()), "--dump-logits", npy.string(), "--threads", "2"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const Tensor logits = read_npy(npy);
  EXPECT_LE(testing::normalized_error(testing::span_of(logits), testing::span_of(ref.logits)),
            kMaxNormalizedError);
  // The qwen3 fixture config has no eos inside the generated ids, so run generates them all.
  EXPECT_THAT(run.out, HasSubstr(fmt::format("generated ids: {}", fmt::join(ref.greedy, " "))));
}

TEST_F(HfCommandLine, RunAcceptsTheCheckpointFolder) {
  const std::filesystem::path hf =
      std::filesystem::path(MG_SOURCE_DIR) / "tests/fixtures/hf/mixtral";
  const Reference ref = load_reference(hf);
  const auto npy = testing::temp_dir("run-hf") / "logits.npy";
  const std::string prompt = fmt::format("{}", fmt::join(ref.prompt, ","));
  const testing::CommandResult run =
      testing::run_moegraph({"run", hf.string(), "--prompt-ids", prompt, "--max-new-tokens", "1",
                             "--dump-logits", npy.string(), "--threads", "2"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("model: hf-mixtral"));
  EXPECT_LE(
      testing::normalized_error(testing::span_of(read_npy(npy)), testing::span_of(ref.logits)),
      kMaxNormalizedError);
}

}  // namespace
}  // namespace mg
