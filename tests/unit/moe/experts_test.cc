// Every CPU experts backend against the fp64 reference over a grid (experts, top-k, odd sizes,
// 0/1/many tokens, every activation, biases, one expert taking all tokens while others get
// none), run through FusedMoEKernel where the format allows.
#include <gtest/gtest.h>

#include "ops/moe/experts/cpu_eigen_experts.h"
#include "ops/moe/experts/cpu_monolithic_experts.h"
#include "ops/moe/kernel/prepare_finalize_all_to_all.h"
#include "tests/unit/moe/experts_test_util.h"

namespace mg {
namespace {

using moe_test::expect_close;
using moe_test::IdPattern;
using moe_test::make_kernel;
using moe_test::make_problem;
using moe_test::Problem;
using moe_test::reference_out;
using moe_test::run_batched;

struct GridPoint {
  int64_t E, k, H, I;
};

// Small enough for the unit suite; tests/slow/moe_experts_grid_test.cc runs a larger one.
const GridPoint kGrid[] = {
    {1, 1, 16, 8}, {3, 2, 13, 7}, {8, 2, 33, 19}, {8, 8, 17, 5}, {64, 6, 24, 12}};
const int64_t kTokenCounts[] = {0, 1, 5, 67};

TEST(ExpertsGrid, EveryBackendMatchesTheReference) {
  ThreadPool pool(2);
  uint32_t seed = 100;
  int cases = 0;
  for (const GridPoint& g : kGrid) {
    for (MoEActivation act : moe_test::kAllActivations) {
      for (int64_t M : kTokenCounts) {
        for (IdPattern pattern : {IdPattern::kRandom, IdPattern::kAllToOne}) {
          const bool biases = (seed % 2) == 0;
          const Problem p = make_problem(g.E, g.k, g.H, g.I, M, act, pattern, biases, seed++);
          const std::string what =
              fmt::format("E={} k={} H={} I={} M={} act={} pattern={} bias={}", g.E, g.k, g.H, g.I,
                          M, activation_name(act), static_cast<int>(pattern), biases);
          const std::vector<float> want = reference_out(p);
          FusedMoEKernel eigen = make_kernel(cpu_eigen_backend(), p);
          expect_close(moe_test::run_kernel(eigen, g.H, p.x, M, p.ids, p.topk_weights, {}, &pool),
                       want, "cpu_eigen " + what);
          expect_close(run_batched(p, &pool), want, "cpu_batched " + what);
          ++cases;
        }
      }
    }
  }
  EXPECT_EQ(cases, 5 * 7 * 4 * 2);
}

TEST(ExpertsGrid, MonolithicRoutesAndMatchesTheReference) {
  ThreadPool pool(2);
  uint32_t seed = 500;
  for (const GridPoint& g : kGrid) {
    for (MoEActivation act : moe_test::kAllActivations) {
      for (int64_t M : kTokenCounts) {
        MoEConfig::Fields f = moe_test::experts_config(g.E, g.k, g.H, g.I, act, true).fields();
        f.routing.renormalize = true;
        const MoEConfig config(f);
        Problem p = make_problem(g.E, g.k, g.H, g.I, M, act, IdPattern::kRandom, true, seed++);
        p.config = config;
        const std::vector<float> logits =
            testing::random_floats(static_cast<size_t>(M * g.E), seed++, -4.0f, 4.0f);
        const reference::Routing r = reference::route(config.routing(), logits, M, {});
        for (double margin : r.margin) ASSERT_GT(margin, 1e-6) << "pick another seed";
        p.ids = r.ids;
        p.topk_weights = r.weights;
        FusedMoEKernel mono = make_kernel(cpu_monolithic_backend(), p);
        expect_close(
            moe_test::run_kernel(mono, g.H, p.x, M, {}, {}, logits, &pool), reference_out(p),
            fmt::format("cpu_monolithic E={} k={} M={} act={}", g.E, g.k, M, activation_name(act)));
      }
    }
  }
}

TEST(Experts, Llama4WeightScalesTheInput) {
  // The router weight multiplies the expert input (prepare applies it); SwiGLU is not
  // homogeneous, so scaling the output instead would differ.
  ThreadPool pool(2);
  Problem p = make_problem(8, 1, 16, 8, 9, MoEActivation::kSiluGated, IdPattern::kRandom, false, 7,
                           RoutingMethod::kLlama4Top1Sigmoid);
  ASSERT_TRUE(p.shape.weight_on_input);
  const std::vector<float> want = reference_out(p);
  FusedMoEKernel eigen = make_kernel(cpu_eigen_backend(), p);
  const std::vector<float> got =
      moe_test::run_kernel(eigen, 16, p.x, 9, p.ids, p.topk_weights, {}, &pool);
  expect_close(got, want, "cpu_eigen");
  // Scaling the output instead is measurably different.
  Problem q = p;
  q.config = moe_test::experts_config(8, 1, 16, 8, MoEActivation::kSiluGated);
  EXPECT_GT(testing::normalized_error(reference_out(q), want), 1e-2);

  // The monolithic backend routes (sigmoid of the top-1 logit) and scales itself.
  const std::vector<float> logits = testing::random_floats(9 * 8, 3, -3.0f, 3.0f);
  const reference::Routing r = reference::route(p.config.routing(), logits, 9, {});
  p.ids = r.ids;
  p.topk_weights = r.weights;
  FusedMoEKernel mono = make_kernel(cpu_monolithic_backend(), p);
  expect_close(moe_test::run_kernel(mono, 16, p.x, 9, {}, {}, logits, &pool), reference_out(p),
               "cpu_monolithic");
}

TEST(Experts, ResultsDoNotDependOnTheThreadCount) {
  const Problem p =
      make_problem(16, 4, 40, 24, 150, MoEActivation::kSiluGated, IdPattern::kRandom, true, 11);
  ThreadPool one(1), four(4);
  FusedMoEKernel a = make_kernel(cpu_eigen_backend(), p);
  EXPECT_EQ(moe_test::run_kernel(a, 40, p.x, 150, p.ids, p.topk_weights, {}, &one),
            moe_test::run_kernel(a, 40, p.x, 150, p.ids, p.topk_weights, {}, &four));
  EXPECT_EQ(run_batched(p, &one), run_batched(p, &four));
}

TEST(FusedMoEKernel, RejectsBatchedExpertsWithAStandardPrepareFinalize) {
  const Problem p =
      make_problem(4, 2, 8, 4, 1, MoEActivation::kSiluGated, IdPattern::kRandom, false, 1);
  ExpertsBuild build{p.config, p.shape, Device::cpu(), moe_test::clone(p.weights), Tensor()};
  EXPECT_MG_ERROR(FusedMoEKernel(std::make_unique<PrepareFinalizeNone>(p.shape, false),
                                 cpu_batched_backend().create(std::move(build))),
                  "experts 'cpu_batched' take the batched activation format, but "
                  "prepare/finalize 'none' produces the standard format");
}

TEST(FusedMoEKernel, RejectsMonolithicExpertsWithAModularOnlyPrepareFinalize) {
  const Problem p =
      make_problem(4, 2, 8, 4, 1, MoEActivation::kSiluGated, IdPattern::kRandom, false, 1);
  ExpertsBuild build{p.config, p.shape, Device::cpu(), moe_test::clone(p.weights), Tensor()};
  EXPECT_MG_ERROR(FusedMoEKernel(std::make_unique<PrepareFinalizeAllToAll>(p.shape, 1),
                                 cpu_monolithic_backend().create(std::move(build))),
                  "experts 'cpu_monolithic' are monolithic (router logits in), but "
                  "prepare/finalize 'all_to_all' only moves routed tokens (modular)");
}

TEST(FusedMoEKernel, AllToAllOnOneRankWithBatchedExperts) {
  // A group of one (null communicator): dispatch and combine are copies, the experts see
  // slabs; the result must equal the standard path's.
  ThreadPool pool(2);
  for (IdPattern pattern : {IdPattern::kRandom, IdPattern::kAllToOne}) {
    for (int64_t M : {0, 1, 19}) {
      const Problem p =
          make_problem(6, 3, 20, 12, M, MoEActivation::kGeluGated, pattern, true, 40 + M);
      const ParallelConfig one(1, 0, 1, 0, true, MoEDispatch::kAllToAll);
      ExpertsBuild build{p.config, p.shape, Device::cpu(), moe_test::clone(p.weights), Tensor()};
      FusedMoEKernel kernel(make_prepare_finalize(one, p.shape),
                            cpu_batched_backend().create(std::move(build)));
      EXPECT_EQ(kernel.str(), "cpu_batched + all_to_all");
      expect_close(moe_test::run_kernel(kernel, 20, p.x, M, p.ids, p.topk_weights, {}, &pool),
                   reference_out(p), fmt::format("M={} pattern={}", M, static_cast<int>(pattern)));
    }
  }
}

TEST(FusedMoEKernel, DescribesItsParts) {
  const Problem p =
      make_problem(4, 2, 8, 4, 1, MoEActivation::kSiluGated, IdPattern::kRandom, false, 1);
  FusedMoEKernel k = make_kernel(cpu_monolithic_backend(), p);
  EXPECT_TRUE(k.is_monolithic());
  EXPECT_TRUE(k.output_is_reduced());
  EXPECT_EQ(k.str(), "cpu_monolithic + none");
}

}  // namespace
}  // namespace mg
