#include "framework/runtime/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "framework/core/error.h"

namespace mg {

int32_t argmax(std::span<const float> logits) {
  MG_ASSERT(!logits.empty(), "argmax of an empty row");
  int32_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i) {
    if (logits[i] > logits[best]) best = static_cast<int32_t>(i);
  }
  return best;
}

void Sampler::validate(const SamplingOptions& o) {
  MG_CHECK(o.temperature >= 0.0f && std::isfinite(o.temperature),
           "temperature must be >= 0, got {}", o.temperature);
  MG_CHECK(o.top_k >= 0, "top-k must be >= 0, got {}", o.top_k);
  MG_CHECK(o.top_p > 0.0f && o.top_p <= 1.0f, "top-p must be in (0, 1], got {}", o.top_p);
}

Sampler::Sampler(SamplingOptions options, uint64_t seed) : options_(options), rng_(seed) {
  validate(options_);
}

int32_t Sampler::sample(std::span<const float> logits) {
  if (options_.temperature == 0.0f) return argmax(logits);
  const size_t n = logits.size();
  order_.resize(n);
  std::iota(order_.begin(), order_.end(), 0);
  // Most likely first; ties by lower id so results do not depend on the sort.
  auto more_likely = [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  size_t keep = n;
  if (options_.top_k > 0 && static_cast<size_t>(options_.top_k) < n) {
    keep = static_cast<size_t>(options_.top_k);
    std::partial_sort(order_.begin(), order_.begin() + keep, order_.end(), more_likely);
  } else {
    std::sort(order_.begin(), order_.end(), more_likely);
  }
  probs_.resize(keep);
  const double max_logit = logits[order_[0]];
  double sum = 0;
  for (size_t i = 0; i < keep; ++i) {
    probs_[i] = std::exp((logits[order_[i]] - max_logit) / options_.temperature);
    sum += probs_[i];
  }
  if (options_.top_p < 1.0f) {
    double cumulative = 0;
    size_t cut = keep;
    for (size_t i = 0; i < keep; ++i) {
      cumulative += probs_[i] / sum;
      if (cumulative >= options_.top_p) {
        cut = i + 1;
        break;
      }
    }
    keep = cut;
    sum = std::accumulate(probs_.begin(), probs_.begin() + keep, 0.0);
  }
  std::uniform_real_distribution<double> uniform(0.0, sum);
  double r = uniform(rng_);
  for (size_t i = 0; i < keep; ++i) {
    r -= probs_[i];
    if (r < 0) return order_[i];
  }
  return order_[keep - 1];
}

}  // namespace mg
