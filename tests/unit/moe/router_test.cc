// Routing: every method on a hand-computed 3-token x 4-expert case (logits written so that the
// scores are round numbers: softmax(ln p) = p / sum p, sigmoid(ln(p / (1 - p))) = p), and on
// random rows against the independent fp64 reference, including NaN/inf rows.
#include <cmath>
#include <limits>
#include <random>

#include <gtest/gtest.h>

#include "framework/core/thread_pool.h"
#include "ops/moe/reference/moe_reference.h"
#include "ops/moe/router/router.h"
#include "ops/moe/router/routing.h"
#include "tests/testing/test_util.h"

namespace mg {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();
float ln(float x) {
  return std::log(x);
}

struct Routed {
  std::vector<int32_t> ids;
  std::vector<float> weights;
};

Routed route_fast(const RoutingConfig& c, const std::vector<float>& logits,
                  const std::vector<float>& bias = {}, ThreadPool* pool = nullptr) {
  const int64_t rows = static_cast<int64_t>(logits.size()) / c.num_experts;
  Routed r{std::vector<int32_t>(static_cast<size_t>(rows * c.top_k)),
           std::vector<float>(static_cast<size_t>(rows * c.top_k))};
  std::vector<float> scratch(static_cast<size_t>(routing_scratch_floats(c, rows)));
  route_rows(c, logits.data(), rows, bias.empty() ? nullptr : bias.data(), r.ids.data(),
             r.weights.data(), scratch.data(), pool);
  return r;
}

RoutingConfig routing(RoutingMethod method, int64_t experts, int64_t k) {
  RoutingConfig c;
  c.method = method;
  c.num_experts = experts;
  c.top_k = k;
  return c;
}

// Checks the fast path and the reference against the hand-computed result.
void expect_routing(const RoutingConfig& c, const std::vector<float>& logits,
                    const std::vector<float>& bias, const std::vector<int32_t>& ids,
                    const std::vector<float>& weights) {
  c.validate();
  const Routed fast = route_fast(c, logits, bias);
  const reference::Routing ref =
      reference::route(c, logits, static_cast<int64_t>(logits.size()) / c.num_experts, bias);
  EXPECT_EQ(fast.ids, ids) << "fast path";
  EXPECT_EQ(ref.ids, ids) << "reference";
  ASSERT_EQ(fast.weights.size(), weights.size());
  for (size_t i = 0; i < weights.size(); ++i) {
    EXPECT_NEAR(fast.weights[i], weights[i], 1e-6) << "fast path, entry " << i;
    EXPECT_NEAR(ref.weights[i], weights[i], 1e-6) << "reference, entry " << i;
  }
}

TEST(RouterHandComputed, SoftmaxTopKRenormalizedMixtral) {
  RoutingConfig c = routing(RoutingMethod::kSoftmaxTopK, 4, 2);
  c.renormalize = true;
  expect_routing(c,
                 {ln(1), ln(2), ln(3), ln(4),  // p = .1 .2 .3 .4
                  0, 0, 0, 0,                  // a tie: the lower ids win
                  ln(5), kNaN, ln(3), ln(2)},  // NaN counts as -inf: p = .5 0 .3 .2
                 {}, {3, 2, 0, 1, 0, 2}, {4.f / 7, 3.f / 7, 0.5f, 0.5f, 0.625f, 0.375f});
}

TEST(RouterHandComputed, SoftmaxTopKScaledDeepSeekV2Greedy) {
  RoutingConfig c = routing(RoutingMethod::kSoftmaxTopK, 4, 2);
  c.routed_scaling_factor = 2.0f;
  const float inf = kInf;
  expect_routing(c,
                 {ln(1), ln(2), ln(3), ln(4),  // p = .1 .2 .3 .4, no renorm
                  -inf, -inf, -inf, -inf,      // no finite logit: ids 0, 1 with weight 0
                  inf, 0, inf, 0},             // two +inf share the mass: p = .5 0 .5 0
                 {}, {3, 2, 0, 1, 0, 2}, {0.8f, 0.6f, 0, 0, 1.0f, 1.0f});
}

TEST(RouterHandComputed, SigmoidTopKWithScoreCorrectionBias) {
  // s = sigmoid(l); the bias picks the experts, the weights stay unbiased.
  RoutingConfig c = routing(RoutingMethod::kSigmoidTopK, 4, 2);
  c.has_score_correction_bias = true;
  c.renormalize = true;
  expect_routing(c,
                 {0, 0, 0, 0,               // s = .5 each; c = .5 .6 .4 .8
                  ln(3), -ln(3), ln(4), 0,  // s = .75 .25 .8 .5; c = .75 .35 .7 .8
                  kNaN, kNaN, kNaN, kNaN},  // s = 0; c = bias: 0 .1 -.1 .3
                 {0.0f, 0.1f, -0.1f, 0.3f}, {3, 1, 3, 0, 3, 1}, {0.5f, 0.5f, 0.4f, 0.6f, 0, 0});
}

TEST(RouterHandComputed, TopKSoftmaxGptOss) {
  // Top-2 of the logits, softmax over the two selected.
  const RoutingConfig c = routing(RoutingMethod::kTopKSoftmax, 4, 2);
  expect_routing(c,
                 {ln(2), ln(6), 0, ln(3),      // picks 1 (ln 6), 3 (ln 3): 6/9, 3/9
                  1, 1, 1, 1,                  // tie: 0, 1 with 1/2 each
                  kNaN, -kInf, -kInf, ln(4)},  // only 3 is finite: 3 gets 1, then 0 (NaN) 0
                 {}, {1, 3, 0, 1, 3, 0}, {2.f / 3, 1.f / 3, 0.5f, 0.5f, 1.0f, 0.0f});
}

TEST(RouterHandComputed, GroupedTopKDeepSeekV3) {
  // Sigmoid scores, bias for selection, 2 groups ({0,1}, {2,3}) scored by the sum of their top
  // two biased scores, 1 group kept, renormalised, x 2.5.
  RoutingConfig c = routing(RoutingMethod::kGroupedTopK, 4, 2);
  c.score_function = ScoreFunction::kSigmoid;
  c.num_groups = 2;
  c.groups_kept = 1;
  c.group_score = GroupScore::kSumTop2;
  c.has_score_correction_bias = true;
  c.renormalize = true;
  c.routed_scaling_factor = 2.5f;
  const std::vector<float> bias = {0.0f, 0.0f, 0.0f, 0.1f};
  const std::vector<float> logits = {
      // s = .8 .2 .75 .5; c = .8 .2 .75 .6; groups 1.0 vs 1.35: keep {2,3}; w = .75 .5
      ln(4), -ln(4), ln(3), 0,
      // s = .8 .7 .5 .4; c = .8 .7 .5 .5; groups 1.5 vs 1.0: keep {0,1}; w = .8 .7
      ln(4), ln(7.f / 3), 0, ln(2.f / 3),
      // No finite logit: s = 0, c = bias = 0 0 0 .1; groups 0 vs .1: keep {2,3}; masked c =
      // 0 0 0 .1: ids 3, then 0 (the masked 0.0 ties with expert 2 and the lower id wins),
      // weights s = 0.
      -kInf, -kInf, -kInf, -kInf};
  expect_routing(c, logits, bias, {2, 3, 0, 1, 3, 0},
                 {1.5f, 1.0f, 2.5f * 0.8f / 1.5f, 2.5f * 0.7f / 1.5f, 0, 0});
}

TEST(RouterHandComputed, GroupedTopKMasksDroppedGroupsWithZeroLikeHF) {
  // When the kept group's biased scores are negative, HF's masked_fill(0.0) makes the dropped
  // group's experts (c = 0.0) win the top-k; their weights are their unbiased scores.
  RoutingConfig c = routing(RoutingMethod::kGroupedTopK, 4, 2);
  c.score_function = ScoreFunction::kSigmoid;
  c.num_groups = 2;
  c.groups_kept = 1;
  c.group_score = GroupScore::kSumTop2;
  c.has_score_correction_bias = true;
  c.renormalize = true;
  c.routed_scaling_factor = 2.5f;
  // s = .8 .7 .5 .4; c = -.2 -.3 -.5 -.6; groups -.5 vs -1.1: keep {0,1}; masked c = -.2 -.3 0 0
  // -> ids 2, 3 (0.0 beats negatives, lower id first); w = .5 .4 -> 5/9 4/9 x 2.5.
  const std::vector<float> logits = {ln(4), ln(7.f / 3), 0,     ln(2.f / 3), ln(4), ln(7.f / 3),
                                     0,     ln(2.f / 3), ln(4), ln(7.f / 3), 0,     ln(2.f / 3)};
  expect_routing(
      c, logits, {-1, -1, -1, -1}, {2, 3, 2, 3, 2, 3},
      {2.5f * 5 / 9, 2.5f * 4 / 9, 2.5f * 5 / 9, 2.5f * 4 / 9, 2.5f * 5 / 9, 2.5f * 4 / 9});
}

TEST(RouterHandComputed, GroupedTopKDeepSeekV2GroupLimited) {
  // Softmax scores, group score = max, no bias, no renorm, x 2.
  RoutingConfig c = routing(RoutingMethod::kGroupedTopK, 4, 2);
  c.score_function = ScoreFunction::kSoftmax;
  c.num_groups = 2;
  c.groups_kept = 1;
  c.group_score = GroupScore::kMax;
  c.routed_scaling_factor = 2.0f;
  expect_routing(c,
                 {ln(1), ln(4), ln(2), ln(3),  // p = .1 .4 .2 .3: groups .4 vs .3 -> {0,1}
                  ln(1), ln(2), ln(4), ln(3),  // p = .1 .2 .4 .3: groups .2 vs .4 -> {2,3}
                  0, 0, 0, 0},                 // tie between groups: the lower one
                 {}, {1, 0, 2, 3, 0, 1}, {0.8f, 0.2f, 0.8f, 0.6f, 0.5f, 0.5f});
}

TEST(RouterHandComputed, Llama4Top1Sigmoid) {
  const RoutingConfig c = routing(RoutingMethod::kLlama4Top1Sigmoid, 4, 1);
  expect_routing(c,
                 {1, ln(3), 0, -2,          // top-1 is 1 (ln 3 > 1): sigmoid = .75
                  -ln(4), -3, -5, -4,       // top-1 is 0: sigmoid(-ln 4) = .2
                  kNaN, kNaN, kNaN, kNaN},  // no finite logit: expert 0, weight 0
                 {}, {1, 0, 0}, {0.75f, 0.2f, 0.0f});
}

// ---- Random rows against the fp64 reference
// -------------------------------------------------------

struct RandomCase {
  const char* name;
  RoutingConfig config;
};

std::vector<RandomCase> random_cases() {
  std::vector<RandomCase> cases;
  for (int64_t E : {1, 3, 8, 16, 64}) {
    for (int64_t k : {1, 2, 6}) {
      if (k > E) continue;
      RoutingConfig c = routing(RoutingMethod::kSoftmaxTopK, E, k);
      cases.push_back({"softmax", c});
      c.renormalize = true;
      cases.push_back({"softmax_renorm", c});
      c = routing(RoutingMethod::kSigmoidTopK, E, k);
      c.has_score_correction_bias = true;
      c.renormalize = true;
      c.routed_scaling_factor = 1.5f;
      cases.push_back({"sigmoid_bias", c});
      cases.push_back({"topk_softmax", routing(RoutingMethod::kTopKSoftmax, E, k)});
      if (E % 4 == 0 && E / 4 * 2 >= k) {
        c = routing(RoutingMethod::kGroupedTopK, E, k);
        c.num_groups = 4;
        c.groups_kept = 2;
        c.score_function = ScoreFunction::kSigmoid;
        c.group_score = GroupScore::kSumTop2;
        c.has_score_correction_bias = true;
        c.renormalize = true;
        c.routed_scaling_factor = 2.5f;
        cases.push_back({"grouped_v3", c});
        c.score_function = ScoreFunction::kSoftmax;
        c.group_score = GroupScore::kMax;
        c.has_score_correction_bias = false;
        c.renormalize = false;
        cases.push_back({"grouped_v2", c});
      }
    }
    cases.push_back({"llama4", routing(RoutingMethod::kLlama4Top1Sigmoid, E, 1)});
  }
  return cases;
}

TEST(RouterRandom, EveryMethodMatchesTheReference) {
  ThreadPool pool(2);
  int64_t checked_rows = 0, skipped_rows = 0;
  uint32_t seed = 1;
  for (const RandomCase& rc : random_cases()) {
    const RoutingConfig& c = rc.config;
    c.validate();
    const int64_t rows = 37;
    std::vector<float> logits =
        testing::random_floats(static_cast<size_t>(rows * c.num_experts), seed++, -4.0f, 4.0f);
    // Awkward rows: NaN, -inf and +inf entries, and a row with no finite logit.
    std::mt19937 rng(seed++);
    for (int64_t t = 0; t < 6 && t < rows; ++t) {
      float* row = logits.data() + t * c.num_experts;
      for (int64_t e = 0; e < c.num_experts; ++e) {
        const int kind = static_cast<int>(rng() % 5);
        if (t == 0)
          row[e] = -kInf;
        else if (kind == 0)
          row[e] = kNaN;
        else if (kind == 1)
          row[e] = -kInf;
        else if (kind == 2 && t == 1)
          row[e] = kInf;
      }
    }
    const std::vector<float> bias =
        c.has_score_correction_bias
            ? testing::random_floats(static_cast<size_t>(c.num_experts), seed++, -0.3f, 0.3f)
            : std::vector<float>{};
    const Routed fast = route_fast(c, logits, bias, &pool);
    const reference::Routing ref = reference::route(c, logits, rows, bias);
    for (int64_t t = 0; t < rows; ++t) {
      if (ref.margin[t] < 1e-5) {
        ++skipped_rows;
        continue;
      }
      ++checked_rows;
      for (int64_t j = 0; j < c.top_k; ++j) {
        const size_t i = static_cast<size_t>(t * c.top_k + j);
        ASSERT_EQ(fast.ids[i], ref.ids[i]) << rc.name << " " << c.str() << " row " << t;
        ASSERT_NEAR(fast.weights[i], ref.weights[i], 1e-6 * std::max(1.0f, ref.weights[i]))
            << rc.name << " " << c.str() << " row " << t;
      }
    }
  }
  // Ties only come from the constructed rows (e.g. the all -inf row is a full tie, margin 0,
  // and is covered by the hand-computed tests).
  EXPECT_GT(checked_rows, 20 * skipped_rows);
}

TEST(RouterRandom, ResultsDoNotDependOnThreads) {
  RoutingConfig c = routing(RoutingMethod::kSoftmaxTopK, 64, 6);
  c.renormalize = true;
  const std::vector<float> logits = testing::random_floats(64 * 301, 7);
  ThreadPool pool(4);
  const Routed a = route_fast(c, logits, {}, nullptr);
  const Routed b = route_fast(c, logits, {}, &pool);
  EXPECT_EQ(a.ids, b.ids);
  EXPECT_EQ(a.weights, b.weights);
}

TEST(RouterGate, LogitsAreXTimesWeightTransposedPlusBias) {
  RoutingConfig c = routing(RoutingMethod::kTopKSoftmax, 5, 2);
  c.has_router_bias = true;
  const int64_t H = 7, M = 3;
  Tensor w = testing::random_tensor({5, H}, 1);
  Tensor b = testing::random_tensor({5}, 2);
  CpuRouter router(c, H, w, b, Tensor());
  const std::vector<float> x = testing::random_floats(M * H, 3);
  std::vector<float> logits(M * 5);
  ThreadPool pool(2);
  router.gate(x.data(), M, logits.data(), &pool);
  for (int64_t t = 0; t < M; ++t) {
    for (int64_t e = 0; e < 5; ++e) {
      double want = b.data<float>()[e];
      for (int64_t h = 0; h < H; ++h) want += double(w.data<float>()[e * H + h]) * x[t * H + h];
      EXPECT_NEAR(logits[t * 5 + e], want, 1e-5);
    }
  }
  std::vector<int32_t> ids(M * 2);
  std::vector<float> weights(M * 2);
  router.route(logits.data(), M, ids.data(), weights.data(), nullptr, &pool);
  const reference::Routing ref = reference::route(c, logits, M, {});
  EXPECT_EQ(ids, ref.ids);
}

}  // namespace
}  // namespace mg
