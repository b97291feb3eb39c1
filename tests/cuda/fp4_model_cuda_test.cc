// FP4 models (make-model --quant mxfp4 | nvfp4) on the GPU against the same model on the CPU
// (cpu_fp4, F32): until an FP4 CUDA kernel exists the oracle picks cuda_dequant, which
// dequantizes the packed codes once at build to BF16 and runs cuda_moe's kernels. Qwen3-MoE (gate
// rows before up rows) and GPT-OSS (interleaved gate/up, biases, SwiGLU-OAI), prefill and decode
// steps. MXFP4 values are exact in BF16 (E2M1 times a power of two); NVFP4's E4M3 x F32 scales
// are rounded to BF16, so the comparison is the whole-model BF16 one.
#include <gtest/gtest.h>

#include <iostream>

#include "framework/compile/execution_plan.h"
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

TEST(CudaFp4Model, CudaDequantMatchesTheCpuModel) {
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
      EXPECT_NE(gpu->plan().describe().find("cuda_dequant (auto"), std::string::npos)
          << gpu->plan().describe();
      const double err = testing::normalized_error(run(*gpu), run(*cpu));
      std::cout << fmt::format("[metric] fp4 {}: logits vs cpu normalised error {:.3g}\n", what,
                               err);
      // BF16 activations through two layers (the unquantized models measure about 1e-2).
      EXPECT_LT(err, 0.05) << what;
    }
  }
}

#endif  // MG_WITH_CUDA

}  // namespace
}  // namespace mg
