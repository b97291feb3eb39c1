// Weight-only INT4 / INT8 models on the GPU against the same model on the CPU (cpu_wna16, F32):
// make-model's integer layouts (int4 / uint4 / int8 / uint8, groups 32, 64, 128 and channel-wise)
// on cuda_wna16, or on cuda_dequant (the codes dequantized once at build to BF16, cuda_moe's
// kernels) where cuda_wna16's weights check refuses them, with the reason in the plan; prefill and
// decode steps,
// integer linears dequantized at build; and the GPTQ act-order fixture imported from Hugging Face
// against its transformers golden. The GPU computes in BF16: the comparison is the whole-model
// BF16 one.
#include <gtest/gtest.h>

#include <iostream>

#include "framework/compile/compiler.h"
#include "framework/compile/execution_plan.h"
#include "framework/import/hf_importer.h"
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
std::vector<float> run(Session& s, const std::vector<int32_t>& prompt) {
  std::vector<int32_t> pos(prompt.size());
  for (size_t i = 0; i < pos.size(); ++i) pos[i] = static_cast<int32_t>(i);
  const Tensor& p = s.forward(prompt, pos);
  std::vector<float> out(p.data<float>(), p.data<float>() + p.numel());
  for (int step = 0; step < 3; ++step) {
    const int32_t id = prompt[step] + 1, at = static_cast<int32_t>(prompt.size()) + step;
    const Tensor& d = s.forward(std::span(&id, 1), std::span(&at, 1));
    out.insert(out.end(), d.data<float>(), d.data<float>() + d.numel());
  }
  return out;
}

// The oracle's CUDA choice for each layout: cuda_wna16 where its kernels take the groups (whole
// groups of a multiple of 32 per row), cuda_dequant otherwise (group 128 over the 160-wide hidden
// size leaves a partial group); both against the CPU model.
TEST(CudaWna16Model, CudaBackendsMatchTheCpuModel) {
  MG_REQUIRE_GPU();
  struct Layout {
    const char* name;
    proto::MoEQuantScheme scheme;
    QuantElement element;
    int64_t group;
    const char* backend;
  };
  const Layout layouts[] = {
      {"int4_g32", proto::MOE_QUANT_INT4_WEIGHT_ONLY, QuantElement::kInt4, 32, "cuda_wna16"},
      {"uint4_g32", proto::MOE_QUANT_INT4_WEIGHT_ONLY, QuantElement::kUInt4, 32, "cuda_wna16"},
      {"uint4_g128", proto::MOE_QUANT_INT4_WEIGHT_ONLY, QuantElement::kUInt4, 128, "cuda_dequant"},
      {"int8_channel", proto::MOE_QUANT_INT8_WEIGHT_ONLY, QuantElement::kInt8, -1, "cuda_wna16"},
      {"uint8_g32", proto::MOE_QUANT_INT8_WEIGHT_ONLY, QuantElement::kUInt8, 32, "cuda_wna16"},
      {"uint8_g64", proto::MOE_QUANT_INT8_WEIGHT_ONLY, QuantElement::kUInt8, 64, "cuda_dequant"},
  };
  for (const Layout& layout : layouts) {
    SCOPED_TRACE(layout.name);
    DecoderSpec spec = testing::small_spec("qwen3_moe");
    spec.hidden = 160;  // not a multiple of 128: a partial last group
    spec.moe_quant = layout.scheme;
    spec.moe_quant_element = layout.element;
    spec.moe_quant_group = layout.group;
    const std::filesystem::path g =
        testing::write_model(testing::temp_dir(std::string("wna16_") + layout.name), spec);
    auto cpu = open(g, Device::cpu());
    auto gpu = open(g, Device::cuda(0));
    const std::string plan = gpu->plan().describe();  // what inspect --plan prints
    EXPECT_NE(plan.find(std::string(layout.backend) + " (auto"), std::string::npos) << plan;
    if (std::string(layout.backend) == "cuda_dequant") {
      EXPECT_NE(plan.find(fmt::format("cuda_wna16: rejected, weights: w13: WNA16 weight columns "
                                      "160 must be a multiple of the group size {}",
                                      layout.group)),
                std::string::npos)
          << plan;
    }
    const std::vector<float> ref = run(*cpu, kPrompt);
    const std::vector<float> got = run(*gpu, kPrompt);
    const double err = testing::normalized_error(got, ref);
    std::cout << fmt::format("[metric] wna16 {} {}: logits vs cpu normalised error {:.3g}\n",
                             layout.name, layout.backend, err);
    EXPECT_LT(err, 0.05) << layout.name;  // BF16 activations and weights against F32
  }
}

TEST(CudaWna16Model, GptqFixtureMatchesItsGolden) {
  MG_REQUIRE_GPU();
  const std::filesystem::path hf =
      std::filesystem::path(MG_SOURCE_DIR) / "tests/fixtures/hf/qwen3_moe_gptq";
  HfImportResult imported = import_hf_checkpoint(hf);
  CompileOptions c;
  c.device = Device::cuda(0);
  c.max_tokens = 64;
  Session s(compile_model(std::move(imported.model), hf / "model.pbtxt", c), SessionOptions{});
  const std::vector<int32_t> prompt = {1, 17, 42, 5, 99, 23, 64, 8, 77, 3, 120, 56};
  std::vector<int32_t> pos(prompt.size());
  for (size_t i = 0; i < pos.size(); ++i) pos[i] = static_cast<int32_t>(i);
  const Tensor& logits = s.forward(prompt, pos);
  const Tensor golden = read_npy(hf / "logits.npy");
  const double err = testing::normalized_error(testing::span_of(logits), testing::span_of(golden));
  std::cout << fmt::format("[metric] wna16 gptq fixture on cuda: vs golden {:.3g}\n", err);
  EXPECT_LT(err, 0.05);
}

#endif  // MG_WITH_CUDA

}  // namespace
}  // namespace mg
