// FP8 models on the GPU against the same model on the CPU (cpu_fp8, F32): make-model's FP8
// layouts (block 128, per row, per projection), every cuda_fp8 kernel forced and the automatic
// choice, prefill (grouped GEMMs) and decode steps (the decode kernels), W8A8 through cuda_fp8 and
// W8A16 through cuda_dequant, an FP8 lm_head through the CUDA linear, and a captured decode step.
// The GPU rounds activations (and the intermediate before its quantization) to BF16, so an
// activation can land on the other side of an E4M3 rounding boundary than on the CPU: the
// comparison is the whole-model BF16 one with room for those flips.
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
const std::vector<int32_t> kShortPrompt = {5, 17, 3, 90, 42};

std::unique_ptr<Session> open(const std::filesystem::path& graph, Device device,
                              const std::string& moe_backend, bool quantize_activations,
                              bool cuda_graph = false) {
  CompileOptions c;
  c.device = device;
  c.max_tokens = 64;
  c.max_seq_len = 64;
  c.moe_backend = moe_backend;
  c.quantize_activations = quantize_activations;
  SessionOptions s;
  s.threads = 2;
  s.cuda_graph = cuda_graph;
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

// Whole-model BF16 against the CPU: all but a quarter of the rows within 5e-2, the whole within
// 0.15 (an E4M3 flip or a near-tie expert choice moves one row far more than rounding does).
void expect_close(const std::vector<float>& got, const std::vector<float>& ref, int64_t vocab,
                  const std::string& what) {
  ASSERT_EQ(got.size(), ref.size());
  const size_t rows = ref.size() / vocab;
  size_t off = 0;
  double worst = 0;
  for (size_t r = 0; r < rows; ++r) {
    const double e = testing::normalized_error(std::span(got).subspan(r * vocab, vocab),
                                               std::span(ref).subspan(r * vocab, vocab));
    worst = std::max(worst, e);
    off += e >= 5e-2;
  }
  const double all = testing::normalized_error(got, ref);
  std::cout << fmt::format(
      "[metric] fp8 {}: logits vs cpu normalised error {:.3g} (worst row "
      "{:.3g}, {} of {} rows >= 5e-2)\n",
      what, all, worst, off, rows);
  EXPECT_LE(off, rows / 4) << what;
  EXPECT_LT(all, 0.15) << what;
}

struct Fp8Layout {
  proto::MoEQuantScheme scheme;
  const char* name;
};
constexpr Fp8Layout kLayouts[] = {{proto::MOE_QUANT_FP8_BLOCK, "block"},
                                  {proto::MOE_QUANT_FP8_PER_CHANNEL, "channel"},
                                  {proto::MOE_QUANT_FP8_PER_TENSOR, "tensor"}};

TEST(CudaFp8Model, EveryKernelMatchesTheCpuModel) {
  MG_REQUIRE_GPU();
  for (const Fp8Layout& layout : kLayouts) {
    DecoderSpec spec = testing::small_spec("qwen3_moe");
    spec.hidden = 160;  // a full 128 block and a partial one; K % 16 == 0 for the FP8 GEMMs
    spec.moe_quant = layout.scheme;
    const std::filesystem::path g =
        testing::write_model(testing::temp_dir(std::string("fp8_") + layout.name), spec);
    const int64_t vocab = spec.vocab;
    auto cpu = open(g, Device::cpu(), "", true);
    const std::vector<float> ref = run(*cpu, kPrompt);
    auto cpu_short = open(g, Device::cpu(), "", true);
    const std::vector<float> ref_short = run(*cpu_short, kShortPrompt);
    for (const char* kernel :
         {"auto", "fp8_mma16", "fp8_mma64", "fp8_wgmma", "fp8_tma", "fp8_tma64", "fp8_decode"}) {
      const std::string what = fmt::format("{} cuda_fp8:{}", layout.name, kernel);
      SCOPED_TRACE(what);
      const std::string request = std::string("cuda_fp8:") + kernel;
      auto gpu = open(g, Device::cuda(0), request, true);
      EXPECT_NE(gpu->plan().describe().find("cuda_fp8 (requested"), std::string::npos);
      if (std::string(kernel) == "fp8_decode") {  // at most 8 tokens per forward
        expect_close(run(*gpu, kShortPrompt), ref_short, vocab, what);
        continue;
      }
      expect_close(run(*gpu, kPrompt), ref, vocab, what);
    }
    // The automatic choice names cuda_fp8; W8A16 runs on cuda_dequant against the CPU's W8A16.
    auto gpu_auto = open(g, Device::cuda(0), "", true);
    EXPECT_NE(gpu_auto->plan().describe().find("cuda_fp8 (auto"), std::string::npos)
        << gpu_auto->plan().describe();
    auto cpu16 = open(g, Device::cpu(), "", false);
    auto gpu16 = open(g, Device::cuda(0), "", false);
    EXPECT_NE(gpu16->plan().describe().find("cuda_dequant (auto"), std::string::npos);
    expect_close(run(*gpu16, kPrompt), run(*cpu16, kPrompt), vocab,
                 std::string(layout.name) + " W8A16 cuda_dequant");
  }
}

// Hidden and intermediate sizes that are not multiples of 128 with 128 x 128 block scales: every
// CUDA FP8 backend computes them (partial last scale blocks in N and K) or refuses them with a
// reason naming the size, never wrong numbers. H = 208 (128 + 80) and I = 96 (one partial block)
// run; H = 200 (not a multiple of 16: the kernels read 16-code vectors) is refused.
TEST(CudaFp8Model, SizesNotMultiplesOf128RunOrAreRefusedWithTheSize) {
  MG_REQUIRE_GPU();
  for (const Fp8Layout& layout : kLayouts) {
    DecoderSpec spec = testing::small_spec("qwen3_moe");
    spec.hidden = 208;
    spec.moe_intermediate = 96;
    spec.moe_quant = layout.scheme;
    const std::filesystem::path g =
        testing::write_model(testing::temp_dir(std::string("fp8_208_") + layout.name), spec);
    auto cpu = open(g, Device::cpu(), "", true);
    const std::vector<float> ref = run(*cpu, kPrompt);
    auto cpu_short = open(g, Device::cpu(), "", true);
    const std::vector<float> ref_short = run(*cpu_short, kShortPrompt);
    for (const char* request : {"cuda_fp8", "cuda_fp8:fp8_mma16", "cuda_fp8:fp8_mma64"}) {
      const std::string what = fmt::format("H 208 I 96 {} {}", layout.name, request);
      SCOPED_TRACE(what);
      auto gpu = open(g, Device::cuda(0), request, true);
      expect_close(run(*gpu, kPrompt), ref, spec.vocab, what);
    }
    auto decode = open(g, Device::cuda(0), "cuda_fp8:fp8_decode", true);
    expect_close(run(*decode, kShortPrompt), ref_short, spec.vocab,
                 std::string("H 208 I 96 decode ") + layout.name);
  }
  // Refusals name the size: H = 200 everywhere; H = 208 on cuda_cublaslt_fp8 (K blocks of 128).
  for (const int64_t hidden : {200, 208}) {
    DecoderSpec spec = testing::small_spec("qwen3_moe");
    spec.hidden = hidden;
    spec.moe_intermediate = 96;
    spec.moe_quant = proto::MOE_QUANT_FP8_BLOCK;
    const std::filesystem::path g =
        testing::write_model(testing::temp_dir(fmt::format("fp8_{}", hidden)), spec);
    std::vector<std::string> requests = {"cuda_cublaslt_fp8"};
    if (hidden == 200) requests = {"", "cuda_fp8", "cuda_cublaslt_fp8"};
    for (const std::string& request : requests) {
      SCOPED_TRACE(fmt::format("H {}, request '{}'", hidden, request));
      try {
        open(g, Device::cuda(0), request, true);
        ADD_FAILURE() << "compiled";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find(std::to_string(hidden)), std::string::npos)
            << e.what();
      }
    }
  }
}

// cuda_cublaslt_fp8 (per-expert cuBLASLt FP8 GEMMs, VEC128 scales) forced, on every FP8 layout,
// against the CPU and against cuda_fp8 (the cross-check): 7 experts (odd, and with 12 tokens x
// top 2 some get none), H 256 and I 128 (two and one K blocks), prefill and decode steps.
TEST(CudaFp8Model, CublasLtBackendMatchesTheCpuAndCudaFp8) {
  MG_REQUIRE_GPU();
  for (const Fp8Layout& layout : kLayouts) {
    DecoderSpec spec = testing::small_spec("qwen3_moe");
    spec.hidden = 256;
    spec.moe_intermediate = 128;
    spec.experts = 7;
    spec.moe_quant = layout.scheme;
    const std::filesystem::path g =
        testing::write_model(testing::temp_dir(std::string("fp8_lt_") + layout.name), spec);
    auto cpu = open(g, Device::cpu(), "", true);
    const std::vector<float> ref = run(*cpu, kPrompt);
    auto lt = open(g, Device::cuda(0), "cuda_cublaslt_fp8", true);
    EXPECT_NE(lt->plan().describe().find("cuda_cublaslt_fp8 (requested"), std::string::npos)
        << lt->plan().describe();
    const std::vector<float> got = run(*lt, kPrompt);
    expect_close(got, ref, spec.vocab, std::string("cuda_cublaslt_fp8 vs cpu ") + layout.name);
    auto fp8 = open(g, Device::cuda(0), "cuda_fp8", true);
    expect_close(got, run(*fp8, kPrompt), spec.vocab,
                 std::string("cuda_cublaslt_fp8 vs cuda_fp8 ") + layout.name);
    // Automatic choice stays cuda_fp8; the plan lists cuda_cublaslt_fp8 among the candidates.
    auto gpu_auto = open(g, Device::cuda(0), "", true);
    EXPECT_NE(gpu_auto->plan().describe().find("cuda_fp8 (auto"), std::string::npos)
        << gpu_auto->plan().describe();
  }
}

TEST(CudaFp8Model, DecodeStepIsCapturedInACudaGraph) {
  MG_REQUIRE_GPU();
  DecoderSpec spec = testing::small_spec("qwen3_moe");
  spec.hidden = 160;
  spec.moe_quant = proto::MOE_QUANT_FP8_BLOCK;
  const std::filesystem::path g = testing::write_model(testing::temp_dir("fp8_graph"), spec);
  auto plain = open(g, Device::cuda(0), "", true);
  auto graphed = open(g, Device::cuda(0), "", true, /*cuda_graph=*/true);
  const std::vector<float> a = run(*plain, kPrompt);
  const std::vector<float> b = run(*graphed, kPrompt);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(a[i], b[i]) << "logit " << i;
}

#endif  // MG_WITH_CUDA

}  // namespace
}  // namespace mg
