// Whole models on the GPU against the CPU: the small test decoder, the bundled tiny-llama and
// tiny-moe, and a small model of every MoE family of make-model give the CPU's logits within the
// activation dtype's tolerance, decode step by step equals prefill on the device, greedy
// generation agrees with the CPU, and `moegraph run --device cuda` runs end to end. Hugging Face
// fixtures imported with the importer's own ops (clamp, attn_temperature, concat_heads) give the
// CPU's logits and greedy tokens too.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <iostream>

#include "framework/compile/execution_plan.h"
#include "framework/import/hf_importer.h"
#include "framework/runtime/session.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/testing/command.h"
#include "tests/testing/model_fixture.h"
#include "tests/unit/ops/nn_test_util.h"

namespace mg {
namespace {

using ::testing::HasSubstr;

std::filesystem::path bundled_model(const std::string& name = "tiny-llama") {
  return std::filesystem::path(MG_SOURCE_DIR) / "models" / name / "model.pbtxt";
}

std::unique_ptr<Session> open_session(const std::filesystem::path& graph, Device device,
                                      std::optional<DType> dtype, int64_t max_tokens = 64,
                                      bool cuda_graph = false,
                                      const std::string& moe_backend = "") {
  CompileOptions c;
  c.device = device;
  c.activation_dtype = dtype;
  c.max_tokens = max_tokens;
  c.moe_backend = moe_backend;
  SessionOptions s;
  s.threads = 2;
  s.cuda_graph = cuda_graph;
  return Session::open(graph, c, s);
}

std::vector<float> prompt_logits(Session& s, const std::vector<int32_t>& ids) {
  std::vector<int32_t> pos(ids.size());
  for (size_t i = 0; i < pos.size(); ++i) pos[i] = static_cast<int32_t>(i);
  const Tensor& t = s.forward(ids, pos);
  return {t.data<float>(), t.data<float>() + t.numel()};
}

// Whole-model tolerances: every layer adds its rounding, so looser than one op's.
struct ModelDtype {
  DType dtype;
  double tolerance;
};
const std::vector<ModelDtype> kModelDtypes = {
    {DType::kBF16, 3e-2}, {DType::kF16, 5e-3}, {DType::kF32, 1e-4}};

const std::vector<int32_t> kPrompt = {5, 17, 3, 90, 42, 8, 64, 1, 33, 2, 71};

// 16-bit activations can flip a near-tie expert choice at a position (the reference routes on
// other roundings), which moves that position's logits by far more than rounding. For MoE models
// in BF16/F16, all but a quarter of the positions must match within `tolerance` and the whole
// within `loose`.
void expect_close_but_for_flips(std::span<const float> got, std::span<const float> ref,
                                double tolerance, double loose) {
  const size_t positions = kPrompt.size(), vocab = ref.size() / positions;
  size_t off = 0;
  for (size_t t = 0; t < positions; ++t) {
    off += testing::normalized_error(got.subspan(t * vocab, vocab),
                                     ref.subspan(t * vocab, vocab)) >= tolerance;
  }
  EXPECT_LE(off, positions / 4) << off << " of " << positions << " positions off";
  EXPECT_LT(testing::normalized_error(got, ref), loose);
}

// Six BF16 decode steps after the prompt: a session replaying the captured graph hands back
// exactly the logits of one launching the same kernels one by one.
void expect_graph_decode_equals_uncaptured(const std::filesystem::path& g) {
  auto plain = open_session(g, Device::cuda(0), DType::kBF16);
  auto graphed = open_session(g, Device::cuda(0), DType::kBF16, 64, /*cuda_graph=*/true);
  prompt_logits(*plain, kPrompt);
  prompt_logits(*graphed, kPrompt);
  for (int step = 0; step < 6; ++step) {
    const int32_t id = kPrompt[step] + 1;
    const int32_t pos = static_cast<int32_t>(kPrompt.size()) + step;
    const Tensor& a = plain->forward(std::span(&id, 1), std::span(&pos, 1));
    const std::vector<float> want(a.data<float>(), a.data<float>() + a.numel());
    const Tensor& b = graphed->forward(std::span(&id, 1), std::span(&pos, 1));
    ASSERT_EQ(static_cast<size_t>(b.numel()), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_EQ(b.data<float>()[i], want[i]) << "step " << step << " logit " << i;
    }
  }
}

class CudaModel : public ::testing::TestWithParam<std::string> {
 protected:
  bool has_moe_layers() const {
    return GetParam().find("llama") == std::string::npos || GetParam() == "small-llama4";
  }

  // "tiny-*": a bundled model; "small-FAMILY": testing::small_spec(FAMILY) written to a temp dir.
  std::filesystem::path graph() {
    const std::string& p = GetParam();
    if (p.rfind("tiny-", 0) == 0) return bundled_model(p);
    return testing::write_model(testing::temp_dir("model"), testing::small_spec(p.substr(6)));
  }
};

TEST_P(CudaModel, PromptLogitsMatchTheCpu) {
  MG_REQUIRE_GPU();
  const auto g = graph();
  auto cpu = open_session(g, Device::cpu(), std::nullopt);
  const std::vector<float> ref = prompt_logits(*cpu, kPrompt);
  for (const ModelDtype& d : kModelDtypes) {
    SCOPED_TRACE(dtype_name(d.dtype));
    auto gpu = open_session(g, Device::cuda(0), d.dtype);
    const std::vector<float> got = prompt_logits(*gpu, kPrompt);
    const double err = testing::normalized_error(got, ref);
    if (has_moe_layers() && d.dtype != DType::kF32) {
      expect_close_but_for_flips(got, ref, d.tolerance, 0.15);
    } else {
      EXPECT_LT(err, d.tolerance);
    }
    // Printed for tools/gpu_check.sh's summary (and docs/gpu.md).
    std::cout << fmt::format("[metric] {} {} logits vs cpu: normalised error {:.3g}\n", GetParam(),
                             dtype_name(d.dtype), err);
  }
}

TEST_P(CudaModel, DecodeStepByStepEqualsPrefillOnTheDevice) {
  MG_REQUIRE_GPU();
  const auto g = graph();
  for (const ModelDtype& d : kModelDtypes) {
    SCOPED_TRACE(dtype_name(d.dtype));
    auto full = open_session(g, Device::cuda(0), d.dtype);
    const std::vector<float> ref = prompt_logits(*full, kPrompt);
    const size_t vocab = ref.size() / kPrompt.size();
    auto steps = open_session(g, Device::cuda(0), d.dtype);
    std::vector<float> stepped;
    for (size_t t = 0; t < kPrompt.size(); ++t) {
      const int32_t id = kPrompt[t];
      const int32_t pos = static_cast<int32_t>(t);
      const Tensor& step = steps->forward(std::span(&id, 1), std::span(&pos, 1));
      std::span<const float> want(ref.data() + t * vocab, vocab);
      stepped.insert(stepped.end(), step.data<float>(), step.data<float>() + step.numel());
      // Same kernels on a different token count: GEMM algorithms may differ, so one rounding
      // step of the dtype is allowed (MoE layers: decode and prefill take different expert
      // kernels, and a rounding may flip a near-tie expert choice; checked over all positions).
      if (!has_moe_layers() || d.dtype == DType::kF32) {
        EXPECT_LT(testing::normalized_error(testing::span_of(step), want), d.tolerance / 2)
            << "position " << t;
      }
    }
    if (has_moe_layers() && d.dtype != DType::kF32) {
      expect_close_but_for_flips(stepped, ref, d.tolerance / 2, 0.15);
    }
  }
}

// The decode step replayed from a CUDA graph computes exactly what the same kernels launched one
// by one compute (the graph is captured on the first one-token forward).
TEST_P(CudaModel, CudaGraphDecodeEqualsUncaptured) {
  MG_REQUIRE_GPU();
  expect_graph_decode_equals_uncaptured(graph());
}

TEST_P(CudaModel, ChunkedPrefillEqualsFullPrefill) {
  MG_REQUIRE_GPU();
  const auto g = graph();
  auto full = open_session(g, Device::cuda(0), DType::kF32);
  auto chunked = open_session(g, Device::cuda(0), DType::kF32, /*max_tokens=*/3);
  EXPECT_LT(
      testing::normalized_error(prompt_logits(*chunked, kPrompt), prompt_logits(*full, kPrompt)),
      1e-5);
}

TEST_P(CudaModel, GreedyGenerationAgreesWithTheCpu) {
  MG_REQUIRE_GPU();
  const auto g = graph();
  GenerateOptions gen;
  gen.max_new_tokens = 8;
  gen.stop_at_eos = false;
  auto cpu = open_session(g, Device::cpu(), std::nullopt);
  const std::vector<int32_t> cpu_ids = cpu->generate(kPrompt, gen).tokens;
  // F32 on the GPU: the same tokens.
  auto gpu32 = open_session(g, Device::cuda(0), DType::kF32);
  EXPECT_EQ(gpu32->generate(kPrompt, gen).tokens, cpu_ids);
  // BF16: a different rounding may flip near-ties, so check each GPU token against the CPU's
  // logits on the GPU's own sequence: its logit is within 2% of the row's range of the maximum.
  auto gpu16 = open_session(g, Device::cuda(0), DType::kBF16);
  const std::vector<int32_t> bf16_ids = gpu16->generate(kPrompt, gen).tokens;
  ASSERT_EQ(bf16_ids.size(), 8u);
  std::vector<int32_t> seq = kPrompt;
  seq.insert(seq.end(), bf16_ids.begin(), bf16_ids.end() - 1);
  auto check = open_session(g, Device::cpu(), std::nullopt);
  const std::vector<float> l = prompt_logits(*check, seq);
  const size_t vocab = l.size() / seq.size();
  int exact = 0;
  for (size_t i = 0; i < bf16_ids.size(); ++i) {
    const float* row = l.data() + (kPrompt.size() - 1 + i) * vocab;
    const float hi = *std::max_element(row, row + vocab);
    const float lo = *std::min_element(row, row + vocab);
    EXPECT_GE(row[bf16_ids[i]], hi - 0.02f * (hi - lo)) << "generated token " << i;
    exact += row[bf16_ids[i]] == hi;
  }
  std::cout << fmt::format("[metric] {} BF16 greedy: {} of 8 tokens are the CPU's argmax\n",
                           GetParam(), exact);
}

INSTANTIATE_TEST_SUITE_P(Models, CudaModel,
                         ::testing::Values("small-llama", "tiny-llama", "tiny-moe", "small-mixtral",
                                           "small-qwen3_moe", "small-qwen2_moe",
                                           "small-deepseek_v3", "small-gpt_oss", "small-llama4"),
                         [](const auto& info) {
                           std::string name = info.param;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

// Checkpoints imported from Hugging Face (tests/fixtures/hf: the tiny models whose CPU logits
// hf_golden_test.cc checks against transformers'), each using an op that only the importer
// emits: OLMoE's clip_qkv (clamp), Llama 4's NoPE layers (attn_temperature), DeepSeek's MLA
// (concat_heads). On the GPU they must give the CPU's logits as the make-model families do.
struct ImportedModel {
  std::string fixture;  // folder under tests/fixtures/hf
  std::string op;       // an op of the imported graph this model is here for
};

void PrintTo(const ImportedModel& m, std::ostream* os) {
  *os << m.fixture;
}

class CudaImportedModel : public ::testing::TestWithParam<ImportedModel> {
 protected:
  // The fixture imported into a temp dir; the graph reads the checkpoint's weights in place.
  std::filesystem::path graph() {
    const std::filesystem::path hf =
        std::filesystem::path(MG_SOURCE_DIR) / "tests/fixtures/hf" / GetParam().fixture;
    return import_hf_to_dir(hf, testing::temp_dir("hf-" + GetParam().fixture));
  }

  // The graph has nodes of the op under test and each one runs a CUDA kernel.
  void expect_op_on_the_gpu(const Session& s, DType dtype) const {
    int nodes = 0;
    for (const PlanNode& n : s.plan().nodes) {
      if (n.op != GetParam().op) continue;
      ++nodes;
      EXPECT_EQ(n.kernel->describe(), fmt::format("cuda {}", dtype_name(dtype))) << n.name;
    }
    EXPECT_GT(nodes, 0) << "the imported graph has no " << GetParam().op << " node";
  }
};

TEST_P(CudaImportedModel, PromptLogitsMatchTheCpu) {
  MG_REQUIRE_GPU();
  const auto g = graph();
  auto cpu = open_session(g, Device::cpu(), std::nullopt);
  const std::vector<float> ref = prompt_logits(*cpu, kPrompt);
  for (const ModelDtype& d : kModelDtypes) {
    SCOPED_TRACE(dtype_name(d.dtype));
    auto gpu = open_session(g, Device::cuda(0), d.dtype);
    expect_op_on_the_gpu(*gpu, d.dtype);
    const std::vector<float> got = prompt_logits(*gpu, kPrompt);
    const double err = testing::normalized_error(got, ref);
    // Every fixture has MoE layers: a 16-bit rounding may flip a near-tie expert choice. The
    // fixtures are tiny random checkpoints (hidden 64), where one flipped position moves the
    // whole prompt's error more than in the make-model models: on the H100 deepseek_v2 measured
    // 0.175 (BF16) and 0.174 (F16) with the flips confined to the allowed quarter of the
    // positions, and F32 within 1e-4, so the whole-prompt bound here is 0.3.
    if (d.dtype != DType::kF32) {
      expect_close_but_for_flips(got, ref, d.tolerance, 0.3);
    } else {
      EXPECT_LT(err, d.tolerance);
    }
    std::cout << fmt::format("[metric] hf-{} {} logits vs cpu: normalised error {:.3g}\n",
                             GetParam().fixture, dtype_name(d.dtype), err);
  }
}

// The decode step replayed from a CUDA graph computes exactly what the same kernels launched one
// by one compute: attn_temperature, like rope and attention, reads each step's position from
// device memory.
TEST_P(CudaImportedModel, CudaGraphDecodeEqualsUncaptured) {
  MG_REQUIRE_GPU();
  expect_graph_decode_equals_uncaptured(graph());
}

TEST_P(CudaImportedModel, GreedyTokensInF32AreTheCpus) {
  MG_REQUIRE_GPU();
  const auto g = graph();
  GenerateOptions gen;
  gen.max_new_tokens = 8;
  gen.stop_at_eos = false;
  auto cpu = open_session(g, Device::cpu(), std::nullopt);
  auto gpu = open_session(g, Device::cuda(0), DType::kF32);
  EXPECT_EQ(gpu->generate(kPrompt, gen).tokens, cpu->generate(kPrompt, gen).tokens);
}

INSTANTIATE_TEST_SUITE_P(HfFixtures, CudaImportedModel,
                         ::testing::Values(ImportedModel{"olmoe", "clamp"},
                                           ImportedModel{"llama4", "attn_temperature"},
                                           ImportedModel{"deepseek_v2", "concat_heads"},
                                           ImportedModel{"deepseek_v3", "concat_heads"}),
                         [](const auto& info) { return info.param.fixture; });

// Every unquantized Hugging Face fixture, the odd-sized ones included (hidden 27 and 36, expert
// intermediate 19 and 13, head_dim 10 and 6: rows that are not 16-byte multiples, run by the
// cuda_padded experts and the cublasGemmEx linears), end to end on the GPU: F32 within 1e-5
// (normalised) of the CPU, BF16 within the make-model bounds but for flipped near-tie expert
// choices, and the CUDA graph decode equal to the uncaptured one.
class CudaHfFixture : public ::testing::TestWithParam<std::string> {
 protected:
  std::filesystem::path graph() {
    const std::filesystem::path hf =
        std::filesystem::path(MG_SOURCE_DIR) / "tests/fixtures/hf" / GetParam();
    return import_hf_to_dir(hf, testing::temp_dir("hf-all-" + GetParam()));
  }
};

TEST_P(CudaHfFixture, F32LogitsMatchTheCpuWithin1e5) {
  MG_REQUIRE_GPU();
  const auto g = graph();
  auto cpu = open_session(g, Device::cpu(), std::nullopt);
  const std::vector<float> ref = prompt_logits(*cpu, kPrompt);
  auto gpu = open_session(g, Device::cuda(0), DType::kF32);
  const double err = testing::normalized_error(prompt_logits(*gpu, kPrompt), ref);
  EXPECT_LT(err, 1e-5);
  std::cout << fmt::format("[metric] hf-{} F32 logits vs cpu: normalised error {:.3g}\n",
                           GetParam(), err);
}

TEST_P(CudaHfFixture, Bf16LogitsMatchTheCpuButForFlips) {
  MG_REQUIRE_GPU();
  const auto g = graph();
  auto cpu = open_session(g, Device::cpu(), std::nullopt);
  const std::vector<float> ref = prompt_logits(*cpu, kPrompt);
  auto gpu = open_session(g, Device::cuda(0), DType::kBF16);
  const std::vector<float> got = prompt_logits(*gpu, kPrompt);
  expect_close_but_for_flips(got, ref, kModelDtypes[0].tolerance, 0.3);
  std::cout << fmt::format("[metric] hf-{} BF16 logits vs cpu: normalised error {:.3g}\n",
                           GetParam(), testing::normalized_error(got, ref));
}

TEST_P(CudaHfFixture, CudaGraphDecodeEqualsUncaptured) {
  MG_REQUIRE_GPU();
  expect_graph_decode_equals_uncaptured(graph());
}

// The odd-sized fixtures' MoE nodes can only run on the padded experts.
TEST(CudaHfFixtureOdd, MoENodesRunOnCudaPadded) {
  MG_REQUIRE_GPU();
  for (const char* fixture : {"mixtral_odd", "qwen3_moe_odd"}) {
    const std::filesystem::path hf =
        std::filesystem::path(MG_SOURCE_DIR) / "tests/fixtures/hf" / fixture;
    const auto g = import_hf_to_dir(hf, testing::temp_dir(std::string("hf-odd-") + fixture));
    auto gpu = open_session(g, Device::cuda(0), DType::kBF16);
    int moe = 0;
    for (const PlanNode& n : gpu->plan().nodes) {
      if (n.op != "moe") continue;
      ++moe;
      EXPECT_THAT(n.kernel->describe(), ::testing::StartsWith("cuda_padded (auto"))
          << fixture << " " << n.name;
    }
    EXPECT_GT(moe, 0) << fixture;
  }
}

INSTANTIATE_TEST_SUITE_P(HfFixtures, CudaHfFixture,
                         ::testing::Values("mixtral", "qwen2_moe", "qwen3_moe", "olmoe",
                                           "deepseek_v2", "deepseek_v2_lite", "deepseek_v3",
                                           "gpt_oss", "llama4", "granitemoe", "granitemoeshared",
                                           "mixtral_odd", "qwen3_moe_odd"),
                         [](const auto& info) { return info.param; });

TEST(CudaSession, TokenIdOutsideTheVocabularyIsAnError) {
  MG_REQUIRE_GPU();
  auto s = open_session(bundled_model(), Device::cuda(0), std::nullopt);
  testing::expect_error(
      [&] {
        prompt_logits(*s, {1, 2, 256});
      },
      {"token id 256 is outside the vocabulary of 256 tokens"});
}

// Greedy generate on a GPU picks each decode step's token on the device
// (Session::greedy_step_on_device). A non-finite logit at a decode step is still the error the
// host gives, naming the step and position: a model whose embedding rows are NaN for every token
// but the prompt's prefills finite logits, then embeds the first generated token (not in the
// prompt) as NaN. CPU and GPU (with and without the CUDA graph) give the same message.
TEST(CudaSession, NonFiniteLogitsAtADecodeStepAreTheHostsError) {
  MG_REQUIRE_GPU();
  const std::filesystem::path graph =
      testing::write_model(testing::temp_dir("nan_decode"), testing::small_spec());
  // A prompt whose first greedy token is not one of its own (so its embedding can be poisoned).
  std::vector<int32_t> prompt;
  int32_t first = -1;
  {
    auto clean = open_session(graph, Device::cpu(), std::nullopt);
    GenerateOptions one;
    one.max_new_tokens = 1;
    for (int32_t a = 3; a < 60 && prompt.empty(); a += 7) {
      const std::vector<int32_t> candidate = {a, a + 1, a + 2};
      first = clean->generate(candidate, one).tokens.at(0);
      if (std::find(candidate.begin(), candidate.end(), first) == candidate.end()) {
        prompt = candidate;
      }
    }
  }
  ASSERT_FALSE(prompt.empty()) << "no prompt whose first greedy token is new";
  const std::filesystem::path weights = graph.parent_path() / "model.safetensors";
  // All-ones bits are a NaN in F32, BF16 and F16 alike.
  testing::edit_weights(weights, [&](const std::string& name, Tensor& t) {
    if (name != "embed_tokens.weight") return;
    const size_t row_bytes = t.nbytes() / static_cast<size_t>(t.shape()[0]);
    for (int64_t id = 0; id < t.shape()[0]; ++id) {
      if (std::find(prompt.begin(), prompt.end(), id) != prompt.end()) continue;
      std::memset(static_cast<char*>(t.raw()) + id * row_bytes, 0xff, row_bytes);
    }
  });
  const std::string expected =
      fmt::format("step 1 produced non-finite logits (position {}, token 0: NaN)", prompt.size());
  GenerateOptions gen;
  gen.max_new_tokens = 4;
  for (const auto& [device, graphed] :
       {std::pair{Device::cpu(), false}, std::pair{Device::cuda(0), false},
        std::pair{Device::cuda(0), true}}) {
    SCOPED_TRACE(fmt::format("{} cuda_graph {}", device.str(), graphed));
    auto s = open_session(graph, device, DType::kF32, 64, graphed);
    try {
      const GenerateResult r = s->generate(prompt, gen);
      ADD_FAILURE() << "generate went on past NaN logits: " << r.tokens.size() << " tokens";
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), HasSubstr(expected));
    }
  }
}

TEST(CudaCli, RunsTheBundledMoEModelOnTheGpu) {
  MG_REQUIRE_GPU();
  auto generated = [](const std::string& out) {
    const size_t at = out.find("generated ids: ");
    return at == std::string::npos ? std::string() : out.substr(at, out.find('\n', at) - at);
  };
  // The default MODEL (models/tiny-moe): in F32 the GPU generates the CPU's tokens.
  const testing::CommandResult gpu =
      testing::run_moegraph({"run", "--device", "cuda", "--dtype", "f32", "--max-new-tokens", "8"});
  ASSERT_EQ(gpu.exit_code, 0) << gpu.err;
  const testing::CommandResult cpu = testing::run_moegraph({"run", "--max-new-tokens", "8"});
  ASSERT_EQ(cpu.exit_code, 0) << cpu.err;
  EXPECT_EQ(generated(gpu.out), generated(cpu.out));
  EXPECT_FALSE(generated(cpu.out).empty());
  const testing::CommandResult bf16 =
      testing::run_moegraph({"run", "--device", "cuda", "--max-new-tokens", "8"});
  ASSERT_EQ(bf16.exit_code, 0) << bf16.err;
  EXPECT_THAT(bf16.out, HasSubstr("generated ids: "));
  const testing::CommandResult plan =
      testing::run_moegraph({"inspect", "--plan", "--device", "cuda"});
  ASSERT_EQ(plan.exit_code, 0) << plan.err;
  EXPECT_THAT(plan.out, HasSubstr("cuda_moe"));
}

TEST(CudaCli, RunsTheBundledDenseModelOnTheGpu) {
  MG_REQUIRE_GPU();
  const std::string model = bundled_model().string();
  const testing::CommandResult bf16 =
      testing::run_moegraph({"run", model, "--device", "cuda", "--max-new-tokens", "6"});
  ASSERT_EQ(bf16.exit_code, 0) << bf16.err;
  EXPECT_THAT(bf16.out, HasSubstr("on cuda:0 (BF16)"));
  EXPECT_THAT(bf16.out, HasSubstr("generated ids: "));
  EXPECT_THAT(bf16.out, HasSubstr("tokens/s"));

  // In F32 the GPU generates the CPU's tokens.
  auto generated = [](const std::string& out) {
    const size_t at = out.find("generated ids: ");
    return at == std::string::npos ? std::string() : out.substr(at, out.find('\n', at) - at);
  };
  const testing::CommandResult f32 = testing::run_moegraph(
      {"run", model, "--device", "cuda", "--dtype", "f32", "--max-new-tokens", "6", "--profile"});
  ASSERT_EQ(f32.exit_code, 0) << f32.err;
  EXPECT_THAT(f32.out, HasSubstr("attention"));  // the per-op profile
  const testing::CommandResult cpu = testing::run_moegraph({"run", model, "--max-new-tokens", "6"});
  ASSERT_EQ(cpu.exit_code, 0) << cpu.err;
  EXPECT_EQ(generated(f32.out), generated(cpu.out));
  EXPECT_FALSE(generated(cpu.out).empty());
}

TEST(CudaSession, CudaGraphRefusesABackendThatSyncsWithTheHost) {
  MG_REQUIRE_GPU();
  testing::expect_error(
      [&] {
        open_session(bundled_model("tiny-moe"), Device::cuda(0), DType::kBF16, 64, true,
                     "cuda_cublas");
      },
      {"--cuda-graph: node", "cuda_cublas", "cannot be captured"});
}

TEST(CudaSession, RunsOnTheSecondGpuAsOnTheFirst) {
  MG_REQUIRE_GPU();
  if (cuda_device_count() < 2) GTEST_SKIP() << "needs two CUDA GPUs";
  // The same kernels on the same kind of GPU: bit for bit, prefill and a captured decode step.
  std::vector<float> logits[2];
  std::vector<float> step[2];
  for (int gpu = 0; gpu < 2; ++gpu) {
    auto s = open_session(bundled_model("tiny-moe"), Device::cuda(gpu), DType::kBF16, 64, true);
    EXPECT_EQ(s->plan().device, Device::cuda(gpu));
    logits[gpu] = prompt_logits(*s, kPrompt);
    const int32_t next = 7, pos = static_cast<int32_t>(kPrompt.size());
    for (int i = 0; i < 2; ++i) {  // the second step replays the graph captured by the first
      const Tensor& t =
          s->forward(std::span<const int32_t>(&next, 1), std::span<const int32_t>(&pos, 1));
      step[gpu].assign(t.data<float>(), t.data<float>() + t.numel());
    }
  }
  EXPECT_EQ(logits[0], logits[1]);
  EXPECT_EQ(step[0], step[1]);
  const testing::CommandResult r =
      testing::run_moegraph({"run", "--device", "cuda:1", "--cuda-graph", "--max-new-tokens", "4"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("on cuda:1 (BF16)"));
}

TEST(CudaSession, RandomWeightsAreMadeOnTheGpuAndMatchTheCpus) {
  MG_REQUIRE_GPU();
  // A graph-only model whose experts (16 x 2 x 128 x 512 x 2 = 2 Mi elements per layer) are above
  // the size made on the device; the CPU makes the same values on the host.
  const auto dir = testing::temp_dir("random-weights");
  const testing::CommandResult made = testing::run_moegraph(
      {"make-model", "--family", "qwen3_moe", "--graph-only", "--out", dir.string(), "--layers",
       "2", "--hidden", "512", "--moe-inter", "128", "--experts", "16", "--vocab", "2048"});
  ASSERT_EQ(made.exit_code, 0) << made.err;
  ASSERT_FALSE(std::filesystem::exists(dir / "model.safetensors"));
  auto open = [&](Device device, std::optional<DType> dtype) {
    CompileOptions c;
    c.device = device;
    c.activation_dtype = dtype;
    c.max_tokens = 64;
    c.random_weights = 7;
    SessionOptions s;
    s.threads = 2;
    return Session::open(dir / "model.pbtxt", c, s);
  };
  auto cpu = open(Device::cpu(), std::nullopt);
  const std::vector<float> want = prompt_logits(*cpu, kPrompt);
  auto gpu = open(Device::cuda(0), DType::kF32);
  const std::vector<float> got = prompt_logits(*gpu, kPrompt);
  // The model's values are BF16 either way, so F32 on the GPU is the CPU's result.
  EXPECT_LT(testing::normalized_error(got, want), 1e-4);
}

// These need no GPU: the flag's checks run before any device work.
TEST(CudaCli, CudaGraphOnTheCpuIsAClearError) {
  const testing::CommandResult r = testing::run_moegraph({"run", "--cuda-graph"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_THAT(r.err, HasSubstr("--cuda-graph needs a CUDA device, not cpu"));
}

TEST(CudaCli, DtypeTheDeviceCannotRunIsAClearError) {
  const testing::CommandResult r = testing::run_moegraph({"run", "--dtype", "bf16"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_THAT(r.err, HasSubstr("activation dtype BF16 is not supported on cpu"));
  const testing::CommandResult bad = testing::run_moegraph({"run", "--dtype", "f8"});
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  EXPECT_THAT(bad.err, HasSubstr("--dtype: unknown dtype 'f8' (expected bf16, f16 or f32)"));
  EXPECT_EQ(testing::run_moegraph({"run", "--dtype", "f32", "--max-new-tokens", "2"}).exit_code, 0);
}

}  // namespace
}  // namespace mg
