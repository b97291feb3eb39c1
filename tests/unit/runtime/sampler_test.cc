#include <gtest/gtest.h>

#include <map>

#include "framework/core/error.h"
#include "framework/runtime/sampler.h"

namespace mg {
namespace {

TEST(Sampler, GreedyPicksArgmaxLowestIdOnTies) {
  Sampler s({}, 0);
  const std::vector<float> logits = {0.1f, 2.0f, -1.0f, 2.0f};
  EXPECT_EQ(s.sample(logits), 1);
}

TEST(Sampler, TopKOneIsGreedy) {
  Sampler s({1.0f, 1, 1.0f}, 7);
  const std::vector<float> logits = {0.1f, 0.3f, 0.2f, -5.0f};
  for (int i = 0; i < 50; ++i) EXPECT_EQ(s.sample(logits), 1);
}

TEST(Sampler, TinyTopPIsGreedy) {
  Sampler s({1.0f, 0, 0.01f}, 7);
  const std::vector<float> logits = {0.1f, 0.3f, 2.2f, -5.0f};
  for (int i = 0; i < 50; ++i) EXPECT_EQ(s.sample(logits), 2);
}

TEST(Sampler, FrequenciesFollowTheSoftmax) {
  // p = softmax([0, ln 3]) = [0.25, 0.75]
  Sampler s({1.0f, 0, 1.0f}, 42);
  const std::vector<float> logits = {0.0f, std::log(3.0f)};
  int ones = 0;
  const int n = 20000;
  for (int i = 0; i < n; ++i) ones += s.sample(logits) == 1;
  EXPECT_NEAR(ones / static_cast<double>(n), 0.75, 0.02);
}

TEST(Sampler, TopPKeepsTheNucleusOnly) {
  // p = [0.5, 0.3, 0.2] → top-p 0.7 keeps ids {0, 1}.
  Sampler s({1.0f, 0, 0.7f}, 3);
  const std::vector<float> logits = {std::log(0.5f), std::log(0.3f), std::log(0.2f)};
  std::map<int, int> seen;
  for (int i = 0; i < 5000; ++i) ++seen[s.sample(logits)];
  EXPECT_EQ(seen.count(2), 0u);
  EXPECT_NEAR(seen[0] / 5000.0, 0.5 / 0.8, 0.03);
}

TEST(Sampler, RejectsBadOptions) {
  EXPECT_THROW(Sampler::validate({-1.0f, 0, 1.0f}), Error);
  EXPECT_THROW(Sampler::validate({1.0f, -2, 1.0f}), Error);
  EXPECT_THROW(Sampler::validate({1.0f, 0, 0.0f}), Error);
  EXPECT_THROW(Sampler::validate({1.0f, 0, 1.5f}), Error);
}

}  // namespace
}  // namespace mg
