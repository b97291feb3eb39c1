// The large experts grid (the unit suite runs a small one): experts 1-64, top-k 1-8, odd and
// larger sizes, 0/1/many tokens, every activation, biases on and off, random routing and one
// expert taking every token.
#include <gtest/gtest.h>

#include "ops/moe/experts/cpu_eigen_experts.h"
#include "ops/moe/experts/cpu_monolithic_experts.h"
#include "tests/unit/moe/experts_test_util.h"

namespace mg {
namespace {

using namespace moe_test;

TEST(MoESlowExpertsGrid, ModularBackendsMatchTheReference) {
  ThreadPool pool(2);
  uint32_t seed = 9000;
  int cases = 0;
  for (int64_t E : {1, 2, 7, 16, 64}) {
    for (int64_t k : {1, 2, 4, 8}) {
      if (k > E) continue;
      for (auto [H, I] : {std::pair<int64_t, int64_t>{64, 48}, {129, 67}}) {
        for (MoEActivation act : kAllActivations) {
          for (int64_t M : {0, 1, 33, 200}) {
            for (IdPattern pattern : {IdPattern::kRandom, IdPattern::kAllToOne}) {
              const bool biases = (seed % 3) == 0;
              const Problem p = make_problem(E, k, H, I, M, act, pattern, biases, seed++);
              const std::string what =
                  fmt::format("E={} k={} H={} I={} M={} act={} pattern={} bias={}", E, k, H, I, M,
                              activation_name(act), static_cast<int>(pattern), biases);
              const std::vector<float> want = reference_out(p);
              FusedMoEKernel eigen = make_kernel(cpu_eigen_backend(), p);
              expect_close(run_kernel(eigen, H, p.x, M, p.ids, p.topk_weights, {}, &pool), want,
                           "cpu_eigen " + what);
              expect_close(run_batched(p, &pool), want, "cpu_batched " + what);
              ++cases;
            }
          }
        }
      }
    }
  }
  EXPECT_GT(cases, 1000);
}

}  // namespace
}  // namespace mg
