// FP4 models (make-model --quant mxfp4 | nvfp4) on the GPU against the same model on the CPU
// (cpu_fp4, F32): the oracle picks cuda_fp4 (codes read packed, dequantized in registers).
// Qwen3-MoE (gate rows before up rows) and GPT-OSS (interleaved gate/up, biases, SwiGLU-OAI),
// prefill and decode steps. MXFP4 values are exact in BF16 (E2M1 times a power of two); NVFP4's
// E4M3 x F32 scales are rounded to BF16, so the comparison is the whole-model BF16 one. And the
// GPT-OSS MXFP4 Hugging Face fixture (tests/fixtures/hf/gpt_oss_mxfp4) imported and run on the GPU
// through cuda_fp4 against transformers' logits.
#include <gtest/gtest.h>

#include <algorithm>
#include <iostream>

#include "framework/compile/compiler.h"
#include "framework/compile/execution_plan.h"
#include "framework/import/hf_importer.h"
#include "framework/io/json.h"
#include "framework/io/npy.h"
#include "framework/runtime/session.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/testing/model_fixture.h"

namespace mg {
namespace {

#ifdef MG_WITH_CUDA

const std::vector<int32_t> kPrompt = {5, 17, 3, 90, 42, 8, 64, 1, 33, 2, 71, 12};

std::unique_ptr<Session> open(const std::filesystem::path& graph, Device device) {
  CompileOptions c;
  c.device = device;
  c.max_tokens = 64;
  c.max_seq_len = 64;
  SessionOptions s;
  s.threads = 2;
  return Session::open(graph, c, s);
}

// The prompt's logits, then three decode steps' (one token each), concatenated.
std::vector<float> run(Session& s) {
  std::vector<int32_t> pos(kPrompt.size());
  for (size_t i = 0; i < pos.size(); ++i) pos[i] = static_cast<int32_t>(i);
  const Tensor& p = s.forward(kPrompt, pos);
  std::vector<float> out(p.data<float>(), p.data<float>() + p.numel());
  for (int step = 0; step < 3; ++step) {
    const int32_t id = kPrompt[step] + 1, at = static_cast<int32_t>(kPrompt.size()) + step;
    const Tensor& d = s.forward(std::span(&id, 1), std::span(&at, 1));
    out.insert(out.end(), d.data<float>(), d.data<float>() + d.numel());
  }
  return out;
}

TEST(CudaFp4Model, CudaFp4MatchesTheCpuModel) {
  MG_REQUIRE_GPU();
  for (const std::string family : {"qwen3_moe", "gpt_oss"}) {
    for (const proto::MoEQuantScheme scheme : {proto::MOE_QUANT_MXFP4, proto::MOE_QUANT_NVFP4}) {
      const std::string what =
          fmt::format("{} {}", family, scheme == proto::MOE_QUANT_MXFP4 ? "mxfp4" : "nvfp4");
      SCOPED_TRACE(what);
      DecoderSpec spec = testing::small_spec(family);
      spec.moe_quant = scheme;
      const std::filesystem::path g = testing::write_model(
          testing::temp_dir(fmt::format("fp4_{}_{}", family, static_cast<int>(scheme))), spec);
      auto cpu = open(g, Device::cpu());
      auto gpu = open(g, Device::cuda(0));
      EXPECT_NE(gpu->plan().describe().find("cuda_fp4 (auto"), std::string::npos)
          << gpu->plan().describe();
      const double err = testing::normalized_error(run(*gpu), run(*cpu));
      std::cout << fmt::format("[metric] fp4 {}: logits vs cpu normalised error {:.3g}\n", what,
                               err);
      // BF16 activations through two layers (the unquantized models measure about 1e-2).
      EXPECT_LT(err, 0.05) << what;
    }
  }
}

// Imports Hugging Face fixture `name` (tests/fixtures/hf), runs its prompt on the GPU and returns
// the normalised error of the logits against its golden (F32 on the CPU); the plan must name
// cuda_fp4 for its MoE nodes.
double fixture_error_on_cuda(const std::string& name) {
  const std::filesystem::path dir =
      std::filesystem::path(MG_SOURCE_DIR) / "tests/fixtures/hf" / name;
  EXPECT_TRUE(std::filesystem::exists(dir / "reference.json")) << dir;
  const nlohmann::json ref = load_json_file(dir / "reference.json");
  std::vector<int32_t> prompt;
  for (const auto& v : ref.at("prompt_ids")) prompt.push_back(v.get<int32_t>());
  const Tensor golden = read_npy(dir / "logits.npy");
  CompileOptions options;
  options.device = Device::cuda(0);
  options.max_tokens = 64;
  SessionOptions so;
  so.threads = 2;
  Session session(compile_model(import_hf_checkpoint(dir).model, dir / "model.pbtxt", options), so);
  EXPECT_NE(session.plan().describe().find("cuda_fp4 (auto"), std::string::npos)
      << session.plan().describe();
  std::vector<int32_t> pos(prompt.size());
  for (size_t i = 0; i < pos.size(); ++i) pos[i] = static_cast<int32_t>(i);
  const Tensor& got = session.forward(prompt, pos);
  EXPECT_EQ(got.shape(), golden.shape());
  if (got.shape() != golden.shape()) return 1.0;
  const std::vector<float> a(got.data<float>(), got.data<float>() + got.numel());
  const std::vector<float> b(golden.data<float>(), golden.data<float>() + golden.numel());
  const double err = testing::normalized_error(a, b);
  int64_t argmax_differs = 0;
  const int64_t vocab = golden.dim(1);
  for (int64_t t = 0; t < golden.dim(0); ++t) {
    const float* ga = a.data() + t * vocab;
    const float* gb = b.data() + t * vocab;
    argmax_differs +=
        (std::max_element(ga, ga + vocab) - ga) != (std::max_element(gb, gb + vocab) - gb);
  }
  std::cout << fmt::format(
      "[metric] {} fixture on cuda_fp4: logits vs golden normalised error {:.3g}, argmax differs "
      "at {} of {} positions\n",
      name, err, argmax_differs, golden.dim(0));
  return err;
}

// The GPT-OSS MXFP4 fixture (interleaved gate/up, biases, SwiGLU-OAI, H = I = 32) as released: the
// golden is transformers' own load of the folder; BF16's whole-model error allowed.
TEST(CudaFp4Model, GptOssMxfp4FixtureRunsThroughCudaFp4) {
  MG_REQUIRE_GPU();
  EXPECT_LT(fixture_error_on_cuda("gpt_oss_mxfp4"), 0.05);
}

// Both NVFP4 formats: ModelOpt (experts) and compressed-tensors (experts and the attention
// projections, which the linear op dequantizes once at build on CUDA), against their dequantized
// fp32 goldens.
TEST(CudaFp4Model, Nvfp4FixturesRunOnTheGpu) {
  MG_REQUIRE_GPU();
  EXPECT_LT(fixture_error_on_cuda("mixtral_nvfp4"), 0.05);
  EXPECT_LT(fixture_error_on_cuda("mixtral_ct_nvfp4"), 0.05);
}

#endif  // MG_WITH_CUDA

}  // namespace
}  // namespace mg
