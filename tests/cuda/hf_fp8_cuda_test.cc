// The FP8 Hugging Face fixtures (tests/fixtures/hf/*fp8*, README_fp8.md) end to end on the GPU,
// W8A8 (the checkpoints' default), against the golden that quantizes every quantized Linear's
// input (logits_w8a8_all.npy). What differs from the CPU, which matches that golden within 1e-4:
//   - activations are BF16 (2^-9 relative per rounding, about 1e-2 normalised over a model, as
//     fp8_model_cuda_test.cc measures), so an activation can cross an E4M3 rounding boundary:
//     one flip costs up to `flip_cost_w8a8_all` (0.002 to 0.041);
//   - gated_mlp and the shared experts run W8A16 on CUDA, and linears whose K is not a multiple
//     of 128 fall back to W8A16 (hidden 64 and 144 of the fixtures: only the block fixtures'
//     o_proj (K 128, 256) and DeepSeek's kv_b (K 128) take the FP8 GEMM): part of the gap
//     between the all-linears and experts-only goldens (`error_w8a8_all_vs_w8a8`, 0.06 to 0.17)
//     remains.
// Bound: the whole-model BF16 bound of fp8_model_cuda_test.cc (0.15 normalised) plus that
// fixture's all-vs-experts gap, and the same argmax at three quarters of the positions; the
// [metric] line gives the measured numbers to tighten it from.
#include <gtest/gtest.h>

#include <algorithm>
#include <iostream>

#include "framework/compile/compiler.h"
#include "framework/import/hf_importer.h"
#include "framework/io/json.h"
#include "framework/io/npy.h"
#include "framework/runtime/session.h"
#include "tests/cuda/cuda_test_util.h"

namespace mg {
namespace {

#ifdef MG_WITH_CUDA

const std::filesystem::path kFixtures = std::filesystem::path(MG_SOURCE_DIR) / "tests/fixtures/hf";

TEST(CudaHfFp8, W8A8PromptLogitsNearTheAllLinearsGolden) {
  MG_REQUIRE_GPU();
  for (const char* name : {"deepseek_v3_fp8", "qwen3_moe_fp8", "deepseek_v3_ct_fp8_channel",
                           "deepseek_v3_ct_fp8_tensor", "qwen3_moe_ct_fp8_channel",
                           "qwen3_moe_ct_fp8_tensor", "qwen3_moe_ct_fp8_static"}) {
    SCOPED_TRACE(name);
    const std::filesystem::path dir = kFixtures / name;
    const nlohmann::json ref = load_json_file(dir / "reference.json");
    std::vector<int32_t> prompt;
    for (int64_t id : json_int_array(ref, "prompt_ids", dir / "reference.json")) {
      prompt.push_back(static_cast<int32_t>(id));
    }
    std::vector<int32_t> pos(prompt.size());
    for (size_t i = 0; i < pos.size(); ++i) pos[i] = static_cast<int32_t>(i);
    const Tensor golden = read_npy(dir / "logits_w8a8_all.npy");
    const double gap = json_double(ref, "error_w8a8_all_vs_w8a8", dir / "reference.json");

    HfImportResult imported = import_hf_checkpoint(dir);
    CompileOptions options;
    options.device = Device::cuda(0);
    options.max_tokens = 64;
    SessionOptions session_options;
    session_options.threads = 2;
    Session session(compile_model(std::move(imported.model), dir / "model.pbtxt", options),
                    session_options);
    const std::string plan = session.plan().describe();
    const Tensor& logits = session.forward(prompt, pos);
    const double err =
        testing::normalized_error(testing::span_of(logits), testing::span_of(golden));
    const int64_t tokens = golden.dim(0), vocab = golden.dim(1);
    int64_t same = 0;
    for (int64_t t = 0; t < tokens; ++t) {
      const float* a = logits.data<float>() + t * vocab;
      const float* b = golden.data<float>() + t * vocab;
      same += (std::max_element(a, a + vocab) - a) == (std::max_element(b, b + vocab) - b);
    }
    const size_t fp8_linears = [&] {
      size_t n = 0;
      for (size_t at = plan.find("cublasLt FP8"); at != std::string::npos;
           at = plan.find("cublasLt FP8", at + 1)) {
        ++n;
      }
      return n;
    }();
    std::cout << fmt::format(
        "[metric] fp8 {} cuda W8A8: vs all-linears golden {:.3g} (all-vs-experts gap {:.3g}), "
        "argmax {}/{}, {} linears on cuBLASLt FP8\n",
        name, err, gap, same, tokens, fp8_linears);
    EXPECT_LE(err, 0.15 + gap);
    // The tiny random fixtures' logits are close together, so BF16 rounding flips some argmaxes:
    // 8 to 11 of 12 agreed on an H100 (2026-11-25); half is the bound, the error above the check.
    EXPECT_GE(same * 2, tokens);
    if (std::string(name).find("_ct_") == std::string::npos) {
      // The block fixtures' o_proj (K 128 or 256, N 144) takes the FP8 GEMM.
      EXPECT_GT(fp8_linears, 0u) << plan;
    }
  }
}

#endif  // MG_WITH_CUDA

}  // namespace
}  // namespace mg
