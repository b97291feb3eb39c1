// The FP8 kernel choice (ops/moe/heuristics/fp8_kernel_choice.h): each rule of its table at its
// edges, forced kernels, and refusals.
#include "ops/moe/heuristics/fp8_kernel_choice.h"

#include <gtest/gtest.h>

#include "tests/unit/moe/moe_test_util.h"

namespace mg {
namespace {

TEST(Fp8KernelChoice, RulesAtTheirEdges) {
  const Fp8Problem p{8, 2, true};
  EXPECT_EQ(choose_fp8_kernel(p, 1, std::nullopt).kernel, Fp8Kernel::kDecode);
  EXPECT_EQ(choose_fp8_kernel(p, 1, std::nullopt).why, "D1: M = 1");
  // 2 tokens x k 2 = 4 rows over 8 experts: <= 1 row per expert -> mma16; up to 64 tokens
  // <= 16 rows per expert -> mma16 too (experts under 16 MiB).
  EXPECT_EQ(choose_fp8_kernel(p, 2, std::nullopt).kernel, Fp8Kernel::kMma16);
  EXPECT_EQ(choose_fp8_kernel(p, 2, std::nullopt).why, "G1: <= 1 row per expert");
  EXPECT_EQ(choose_fp8_kernel(p, 9, std::nullopt).kernel, Fp8Kernel::kMma16);
  EXPECT_EQ(choose_fp8_kernel(p, 64, std::nullopt).kernel, Fp8Kernel::kMma16);
  // 65..256 tokens: <= 64 rows per expert -> the 64-row TMA tiles; above, the 128-row ones.
  EXPECT_EQ(choose_fp8_kernel(p, 65, std::nullopt).kernel, Fp8Kernel::kTma64);
  EXPECT_EQ(choose_fp8_kernel(p, 65, std::nullopt).why, "G2: <= 64 rows per expert, sm_90a");
  EXPECT_EQ(choose_fp8_kernel(p, 256, std::nullopt).kernel, Fp8Kernel::kTma64);
  EXPECT_EQ(choose_fp8_kernel(p, 257, std::nullopt).kernel, Fp8Kernel::kTma);
  EXPECT_EQ(choose_fp8_kernel(p, 257, std::nullopt).why, "G3: > 64 rows per expert, sm_90a");
  // Experts of >= 16 MiB of codes leave the 16-row tiles from 2 rows per expert once there are
  // kFp8TmaMinRows rows: 32 experts, k 2, so 16 tokens are 1 row an expert, 17 to 31 tokens
  // fewer than 64 rows, 32 to 256 up to 16 rows an expert.
  const Fp8Problem big{32, 2, true, kFp8SmallExpertBytes};
  EXPECT_EQ(choose_fp8_kernel(big, 16, std::nullopt).kernel, Fp8Kernel::kMma16);
  EXPECT_EQ(choose_fp8_kernel(big, 16, std::nullopt).why, "G1: <= 1 row per expert");
  EXPECT_EQ(choose_fp8_kernel(big, 17, std::nullopt).kernel, Fp8Kernel::kMma16);
  EXPECT_EQ(choose_fp8_kernel(big, 31, std::nullopt).why,
            "G1: <= 16 rows per expert, fewer rows than a TMA box");
  EXPECT_EQ(choose_fp8_kernel(big, 32, std::nullopt).kernel, Fp8Kernel::kTma64);
  EXPECT_EQ(choose_fp8_kernel(big, 1024, std::nullopt).kernel, Fp8Kernel::kTma64);
  EXPECT_EQ(choose_fp8_kernel(big, 1025, std::nullopt).kernel, Fp8Kernel::kTma);
  // Mixtral's 8 experts of 168 MiB, k 2: 8 and 16 tokens (2 and 4 rows an expert) stay on mma16.
  const Fp8Problem mixtral{8, 2, true, int64_t{168} << 20};
  EXPECT_EQ(choose_fp8_kernel(mixtral, 16, std::nullopt).kernel, Fp8Kernel::kMma16);
  EXPECT_EQ(choose_fp8_kernel(mixtral, 32, std::nullopt).kernel, Fp8Kernel::kTma64);
  const Fp8Problem small{32, 2, true, kFp8SmallExpertBytes - 1};
  EXPECT_EQ(choose_fp8_kernel(small, 256, std::nullopt).kernel, Fp8Kernel::kMma16);
  EXPECT_EQ(choose_fp8_kernel(small, 256, std::nullopt).why,
            "G1: <= 16 rows per expert, experts under 16 MiB");
  EXPECT_EQ(choose_fp8_kernel(small, 257, std::nullopt).kernel, Fp8Kernel::kTma64);
  const Fp8Problem big_plain{32, 2, false, kFp8SmallExpertBytes};  // no sm_90a code
  EXPECT_EQ(choose_fp8_kernel(big_plain, 32, std::nullopt).why,
            "G1: <= 16 rows per expert, no sm_90a kernels");
  const Fp8Problem plain{8, 2, false};  // no sm_90a code: 64-row mma tiles
  for (const int64_t tokens : {65, 257}) {
    EXPECT_EQ(choose_fp8_kernel(plain, tokens, std::nullopt).kernel, Fp8Kernel::kMma64);
    EXPECT_EQ(choose_fp8_kernel(plain, tokens, std::nullopt).why,
              "G4: > 16 rows per expert, no sm_90a kernels");
  }
}

TEST(Fp8KernelChoice, RequestsAreHonouredOrRefusedWithAReason) {
  const Fp8Problem p{8, 2, true};
  for (const std::string& name : fp8_kernel_request_names()) {
    const std::optional<Fp8Kernel> k = parse_fp8_kernel_request(name);
    EXPECT_EQ(k.has_value(), name != "auto") << name;
    if (k) {
      EXPECT_EQ(choose_fp8_kernel(p, 3, k).kernel, *k) << name;
    }
  }
  EXPECT_EQ(check_fp8_kernel_request(p, Fp8Kernel::kWgmma), "");
  EXPECT_EQ(check_fp8_kernel_request(p, Fp8Kernel::kTma), "");
  EXPECT_EQ(check_fp8_kernel_request(p, Fp8Kernel::kTma64), "");
  EXPECT_MG_ERROR(parse_fp8_kernel_request("fp8_mma128"),
                  "unknown FP8 MoE kernel 'fp8_mma128' (known: auto, fp8_decode");
  EXPECT_MG_ERROR(choose_fp8_kernel(p, 9, Fp8Kernel::kDecode),
                  "cuda_fp8:fp8_decode takes at most 8 tokens per forward, got 9");
  const Fp8Problem no_sm90a{8, 2, false};
  EXPECT_EQ(check_fp8_kernel_request(no_sm90a, Fp8Kernel::kWgmma),
            "fp8_wgmma needs the sm_90a kernels, which this GPU or build lacks");
  EXPECT_MG_ERROR(choose_fp8_kernel(no_sm90a, 100, Fp8Kernel::kWgmma), "needs the sm_90a kernels");
  EXPECT_EQ(check_fp8_kernel_request(no_sm90a, Fp8Kernel::kTma),
            "fp8_tma needs the sm_90a kernels, which this GPU or build lacks");
  EXPECT_EQ(check_fp8_kernel_request(no_sm90a, Fp8Kernel::kTma64),
            "fp8_tma64 needs the sm_90a kernels, which this GPU or build lacks");
}

}  // namespace
}  // namespace mg
