// `moegraph run` as processes talking through NCCL. On one GPU: a run of world size 1 through
// the launcher path (environment, NCCL communicator, process rank) gives the plain run's logits
// bit for bit. With 2+ GPUs (tools/multi_gpu_check.sh): --tp 2 and --tp 2 --ep over two
// processes give the single-GPU logits within F32 rounding.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "framework/io/npy.h"
#include "framework/parallel/nccl_communicator.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/testing/command.h"
#include "tests/testing/model_fixture.h"
#include "tests/testing/test_util.h"

namespace mg {
namespace {

#ifdef MG_WITH_CUDA

using ::testing::HasSubstr;
using testing::run_moegraph;

#define MG_REQUIRE_NCCL()                                                                          \
  do {                                                                                             \
    MG_REQUIRE_GPU();                                                                              \
    if (!::mg::built_with_nccl()) GTEST_SKIP() << "built without NCCL (MG_NCCL=OFF or not found)"; \
  } while (false)

const testing::EnvChanges kNoNvls = {{"NCCL_NVLS_ENABLE", "0"}};

TEST(NcclRun, OneRankThroughNcclMatchesThePlainRun) {
  MG_REQUIRE_NCCL();
  const auto dir = testing::temp_dir("nccl_run");
  const std::vector<std::string> base = {"run", "--device",     "cuda", "--max-new-tokens",
                                         "4",   "--dump-logits"};
  auto args = [&](const std::string& npy) {
    std::vector<std::string> a = base;
    a.push_back((dir / npy).string());
    return a;
  };
  const auto plain = run_moegraph(args("plain.npy"), {}, kNoNvls);
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  testing::EnvChanges env = kNoNvls;
  env["RANK"] = "0";
  env["WORLD_SIZE"] = "1";
  const auto launched = run_moegraph(args("env.npy"), {}, env);
  ASSERT_EQ(launched.exit_code, 0) << launched.err;
  EXPECT_THAT(launched.out, HasSubstr("on 1 GPU processes (NCCL)"));
  std::vector<std::string> spawned_args = args("spawned.npy");
  spawned_args.insert(spawned_args.begin(), {"--nproc-per-node", "1"});
  const auto spawned = run_moegraph(spawned_args, {}, kNoNvls);
  ASSERT_EQ(spawned.exit_code, 0) << spawned.err;
  const Tensor want = read_npy(dir / "plain.npy");
  for (const char* npy : {"env.npy", "spawned.npy"}) {
    const Tensor got = read_npy(dir / npy);
    ASSERT_EQ(got.shape(), want.shape()) << npy;
    for (int64_t i = 0; i < got.numel(); ++i) {
      ASSERT_EQ(got.data<float>()[i], want.data<float>()[i]) << npy << " element " << i;
    }
  }
}

TEST(NcclRun, TpAndEpOverTwoGpusMatchOneGpu) {
  MG_REQUIRE_NCCL();
  if (cuda_device_count() < 2) GTEST_SKIP() << "needs 2 GPUs";
  const auto dir = testing::temp_dir("nccl_tp");
  for (const char* family : {"mixtral", "qwen2_moe", "deepseek_v3", "gpt_oss"}) {
    DecoderSpec spec = testing::small_spec(family);
    spec.layers = 3;
    const std::string graph = testing::write_model(dir / family, spec).string();
    const std::vector<std::string> common = {"run",
                                             graph,
                                             "--device",
                                             "cuda",
                                             "--dtype",
                                             "f32",
                                             "--prompt-ids",
                                             "3,14,15,92,65,35,89,79",
                                             "--max-new-tokens",
                                             "3"};
    std::vector<std::string> single = common;
    single.insert(single.end(), {"--dump-logits", (dir / "single.npy").string()});
    const auto r1 = run_moegraph(single, {}, kNoNvls);
    ASSERT_EQ(r1.exit_code, 0) << family << ": " << r1.err;
    const Tensor want = read_npy(dir / "single.npy");
    for (const std::vector<std::string>& layout :
         {std::vector<std::string>{"--tp", "2"}, std::vector<std::string>{"--tp", "2", "--ep"}}) {
      std::vector<std::string> a = common;
      a.insert(a.begin(), {"--nproc-per-node", "2"});
      a.insert(a.end(), layout.begin(), layout.end());
      a.insert(a.end(), {"--dump-logits", (dir / "tp.npy").string()});
      const auto r = run_moegraph(a, {}, kNoNvls);
      const std::string label = fmt::format("{} {}", family, fmt::join(layout, " "));
      ASSERT_EQ(r.exit_code, 0) << label << ": " << r.err;
      const Tensor got = read_npy(dir / "tp.npy");
      ASSERT_EQ(got.shape(), want.shape()) << label;
      EXPECT_LT(testing::normalized_error(testing::span_of(got), testing::span_of(want)), 1e-5)
          << label;
    }
  }
}

#endif  // MG_WITH_CUDA

}  // namespace
}  // namespace mg
