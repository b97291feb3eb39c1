// Programmatic dependent launch (framework/device/cuda/pdl.cuh) on the GPU.
//
// The contract: chains of launch_pdl kernels in which the consumer would read stale data if it
// did not wait (the producer lets it launch at once and writes only after spinning) give the
// right values over many rounds, eagerly and captured in a CUDA graph, directly, through a
// memset, through a kernel that reads nothing (rule 2: every kernel waits) and across streams
// joined by events. That the chains test anything: a consumer that reads before pdl_wait does
// see stale values with PDL on (so the launches really overlap, in graphs too) and never with
// MG_PDL off (the switch makes them ordinary launches). That one cannot pass under
// compute-sanitizer, which runs kernels one after another (tools/gpu_check.sh leaves it out).
//
// The model: every kernel of the decode step is launched through launch_pdl; logits with PDL on
// and off are bit for bit the same (prefill and decode, with and without CUDA graphs, MoE models
// with and without shared experts on the side stream), and so are they with the norms and the
// split-KV attention letting their successors start early (pdl_wait_then_launch) and without.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "framework/compile/compiler.h"
#include "framework/import/hf_importer.h"
#include "framework/runtime/session.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/testing/session_logits.h"

#ifdef MG_WITH_CUDA
#include "framework/device/cuda/pdl.h"
#include "tests/cuda/pdl_chain_kernels.h"
#endif

namespace mg {
namespace {

#ifdef MG_WITH_CUDA

// Sets one of pdl.h's switches (MG_PDL's, MG_PDL_EARLY's) for a scope and restores what it was.
class ScopedSwitch {
 public:
  ScopedSwitch(bool (*get)(), void (*set)(bool), bool value) : set_(set), before_(get()) {
    set_(value);
  }
  ~ScopedSwitch() { set_(before_); }
  ScopedSwitch(const ScopedSwitch&) = delete;
  ScopedSwitch& operator=(const ScopedSwitch&) = delete;

 private:
  void (*set_)(bool);
  bool before_;
};

struct PdlSwitch : ScopedSwitch {
  explicit PdlSwitch(bool enabled)
      : ScopedSwitch(cuda::pdl_enabled, cuda::set_pdl_enabled, enabled) {}
};

struct EarlySwitch : ScopedSwitch {
  explicit EarlySwitch(bool early)
      : ScopedSwitch(cuda::pdl_early_dependents, cuda::set_pdl_early_dependents, early) {}
};

bool device_has_pdl() {
  int device = 0, major = 0;
  MG_CUDA_CHECK(cudaGetDevice(&device));
  MG_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  return major >= 9;
}

// No GPU needed: the switch's reading of MG_PDL.
TEST(CudaPdl, MgPdlIsZeroOrOne) {
  EXPECT_TRUE(cuda::pdl_requested_by(nullptr));
  EXPECT_TRUE(cuda::pdl_requested_by("1"));
  EXPECT_FALSE(cuda::pdl_requested_by("0"));
  for (const char* bad : {"", "2", "on", "off", "00", "1 "}) {
    EXPECT_THAT([&] { cuda::pdl_requested_by(bad); },
                ::testing::ThrowsMessage<Error>(::testing::HasSubstr("MG_PDL: expected 0 or 1")))
        << "'" << bad << "'";
  }
}

TEST(CudaPdl, MgPdlEarlyIsZeroOrOne) {
  EXPECT_TRUE(cuda::pdl_early_requested_by(nullptr));
  EXPECT_TRUE(cuda::pdl_early_requested_by("1"));
  EXPECT_FALSE(cuda::pdl_early_requested_by("0"));
  for (const char* bad : {"", "2", "yes", "01"}) {
    EXPECT_THAT(
        [&] { cuda::pdl_early_requested_by(bad); },
        ::testing::ThrowsMessage<Error>(::testing::HasSubstr("MG_PDL_EARLY: expected 0 or 1")))
        << "'" << bad << "'";
  }
}

constexpr int kRounds = 200;
constexpr int kElements = 4096;
constexpr int kSpinUs = 20;

TEST(CudaPdl, ConsumersThatWaitSeeTheProducersValues) {
  MG_REQUIRE_GPU();
  using testing::PdlChain;
  for (const bool pdl : {true, false}) {
    PdlSwitch on(pdl);
    for (const PdlChain chain : {PdlChain::kDirect, PdlChain::kThroughMemset,
                                 PdlChain::kThroughMiddleKernel, PdlChain::kAcrossStreams}) {
      for (const bool graph : {false, true}) {
        SCOPED_TRACE(
            fmt::format("pdl {} chain {} cuda_graph {}", pdl, static_cast<int>(chain), graph));
        const testing::PdlChainResult r =
            testing::run_pdl_chain(chain, kRounds, kElements, kSpinUs, graph, 3);
        EXPECT_EQ(r.checked, static_cast<int64_t>(kRounds) * kElements * (graph ? 3 : 1));
        EXPECT_EQ(r.wrong, 0);
      }
    }
  }
}

TEST(CudaPdl, AConsumerThatReadsBeforeWaitingSeesStaleValuesOnlyWithPdl) {
  MG_REQUIRE_GPU();
  if (!device_has_pdl()) GTEST_SKIP() << "programmatic dependent launch needs sm_90";
  for (const bool graph : {false, true}) {
    SCOPED_TRACE(fmt::format("cuda_graph {}", graph));
    {
      PdlSwitch on(true);
      const testing::PdlChainResult r = testing::run_pdl_chain(
          testing::PdlChain::kConsumerReadsEarly, kRounds, kElements, kSpinUs, graph, 3);
      // The consumer launched while the producer spun: the launches overlap.
      EXPECT_GT(r.wrong, 0) << "no stale read in " << r.checked << ": PDL did not overlap";
    }
    {
      PdlSwitch off(false);
      const testing::PdlChainResult r = testing::run_pdl_chain(
          testing::PdlChain::kConsumerReadsEarly, kRounds, kElements, kSpinUs, graph, 3);
      EXPECT_EQ(r.wrong, 0) << "MG_PDL off must give ordinary launches";
    }
  }
}

std::shared_ptr<const ExecutionPlan> compile_for_gpu(const std::filesystem::path& model,
                                                     DType dtype) {
  CompileOptions options;
  options.device = Device::cuda(0);
  options.activation_dtype = dtype;
  options.max_tokens = 64;
  if (model.extension() == ".pbtxt") return compile_graph_file(model, options);
  HfImportResult imported = import_hf_checkpoint(model);
  return compile_model(std::move(imported.model), model / "model.pbtxt", options);
}

std::vector<float> logits_with_pdl(std::shared_ptr<const ExecutionPlan> plan, bool cuda_graph,
                                   bool pdl) {
  PdlSwitch the_switch(pdl);
  SessionOptions so;
  so.threads = 2;
  so.cuda_graph = cuda_graph;
  Session s(std::move(plan), so);
  return testing::prompt_and_decode_logits(s);
}

TEST(CudaPdl, ModelLogitsAreBitIdenticalWithPdlOnAndOff) {
  MG_REQUIRE_GPU();
  const std::filesystem::path src(MG_SOURCE_DIR);
  // tiny-moe and qwen2_moe have shared experts (queued on the side stream at decode sizes).
  for (const auto& model :
       {src / "models/tiny-moe/model.pbtxt", src / "tests/fixtures/hf/qwen3_moe",
        src / "tests/fixtures/hf/qwen2_moe"}) {
    for (const DType dtype : {DType::kBF16, DType::kF32}) {
      const std::shared_ptr<const ExecutionPlan> plan = compile_for_gpu(model, dtype);
      for (const bool graph : {false, true}) {
        SCOPED_TRACE(fmt::format("{} {} cuda_graph {}", model.string(), dtype_name(dtype), graph));
        const std::vector<float> on = logits_with_pdl(plan, graph, true);
        const std::vector<float> off = logits_with_pdl(plan, graph, false);
        ASSERT_EQ(on.size(), off.size());
        ASSERT_FALSE(on.empty());
        EXPECT_EQ(std::memcmp(on.data(), off.data(), on.size() * sizeof(float)), 0);
      }
    }
  }
}

// The kernels that let their successor start before their own pdl_wait (the norms, the split-KV
// attention) followed by every op the families put after them: the GEMVs, rope, the MLA's
// linears after a norm, Llama-4's L2 norms, GPT-OSS's sinks.
TEST(CudaPdl, ModelLogitsAreBitIdenticalWithEarlyDependentsOnAndOff) {
  MG_REQUIRE_GPU();
  const std::filesystem::path src(MG_SOURCE_DIR);
  for (const auto& model :
       {src / "models/tiny-moe/model.pbtxt", src / "tests/fixtures/hf/qwen3_moe",
        src / "tests/fixtures/hf/deepseek_v2", src / "tests/fixtures/hf/llama4",
        src / "tests/fixtures/hf/gpt_oss", src / "tests/fixtures/hf/olmoe"}) {
    for (const DType dtype : {DType::kBF16, DType::kF32}) {
      const std::shared_ptr<const ExecutionPlan> plan = compile_for_gpu(model, dtype);
      for (const bool graph : {false, true}) {
        SCOPED_TRACE(fmt::format("{} {} cuda_graph {}", model.string(), dtype_name(dtype), graph));
        std::vector<float> early, late;
        {
          EarlySwitch the_switch(true);
          early = logits_with_pdl(plan, graph, true);
        }
        {
          EarlySwitch the_switch(false);
          late = logits_with_pdl(plan, graph, true);
        }
        ASSERT_EQ(early.size(), late.size());
        ASSERT_FALSE(early.empty());
        EXPECT_EQ(std::memcmp(early.data(), late.data(), early.size() * sizeof(float)), 0);
      }
    }
  }
}

#endif  // MG_WITH_CUDA

}  // namespace
}  // namespace mg
