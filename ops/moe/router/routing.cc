#include "ops/moe/router/routing.h"

#include <cmath>
#include <limits>

#include "framework/core/error.h"
#include "framework/core/thread_pool.h"

namespace mg {

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr float kRenormEpsilon = 1e-20f;

// NaN -> -inf, +inf -> the largest float (see the rules in routing.h).
inline float sanitize_logit(float l) {
  if (std::isnan(l)) return kNegInf;
  return std::min(l, std::numeric_limits<float>::max());
}

// Selection key: NaN counts as -inf.
inline float key_of(float c) {
  return std::isnan(c) ? kNegInf : c;
}

inline float sigmoid(float l) {
  return 1.0f / (1.0f + std::exp(-l));
}

// Keeps the k best (key, index) pairs seen so far, best first, in keys[0..k) / ids[0..k).
// Indices must arrive ascending: a later index only displaces an earlier one with a strictly
// greater key, which makes the lower index win ties.
class TopK {
 public:
  TopK(float* keys, int32_t* ids, int64_t k) : keys_(keys), ids_(ids), k_(k) {}

  void offer(float key, int32_t id) {
    key = key_of(key);
    int64_t pos;
    if (size_ < k_) {
      pos = size_++;
    } else {
      if (!(key > keys_[k_ - 1])) return;
      pos = k_ - 1;
    }
    while (pos > 0 && key > keys_[pos - 1]) {
      keys_[pos] = keys_[pos - 1];
      ids_[pos] = ids_[pos - 1];
      --pos;
    }
    keys_[pos] = key;
    ids_[pos] = id;
  }

 private:
  float* keys_;
  int32_t* ids_;
  int64_t k_;
  int64_t size_ = 0;
};

// Softmax over the sanitized logits of a row: p_i = exp(l_i - max) / sum.
struct SoftmaxStats {
  float max = kNegInf;
  float inv_sum = 0.0f;  // 0 when no logit is finite: every p is 0

  SoftmaxStats(const float* logits, int64_t n) {
    for (int64_t i = 0; i < n; ++i) max = std::max(max, sanitize_logit(logits[i]));
    if (max == kNegInf) return;
    float sum = 0.0f;
    for (int64_t i = 0; i < n; ++i) sum += std::exp(sanitize_logit(logits[i]) - max);
    inv_sum = 1.0f / sum;
  }
  float prob(float logit) const {
    return inv_sum == 0.0f ? 0.0f : std::exp(sanitize_logit(logit) - max) * inv_sum;
  }
};

// The score function applied to one row, without materialising it.
class RowScores {
 public:
  RowScores(ScoreFunction function, const float* logits, int64_t n)
      : function_(function),
        logits_(logits),
        softmax_(function == ScoreFunction::kSoftmax ? SoftmaxStats(logits, n)
                                                     : SoftmaxStats(logits, 0)) {}
  float operator()(int64_t i) const {
    switch (function_) {
      case ScoreFunction::kSoftmax:
        return softmax_.prob(logits_[i]);
      case ScoreFunction::kSigmoid:
        return sigmoid(sanitize_logit(logits_[i]));
    }
    return 0.0f;
  }

 private:
  ScoreFunction function_;
  const float* logits_;
  SoftmaxStats softmax_;
};

void renormalize_and_scale(const RoutingConfig& c, float* weights) {
  if (c.renormalize) {
    float sum = 0.0f;
    for (int64_t j = 0; j < c.top_k; ++j) sum += weights[j];
    const float inv = 1.0f / (sum + kRenormEpsilon);
    for (int64_t j = 0; j < c.top_k; ++j) weights[j] *= inv;
  }
  if (c.routed_scaling_factor != 1.0f) {
    for (int64_t j = 0; j < c.top_k; ++j) weights[j] *= c.routed_scaling_factor;
  }
}

// SOFTMAX_TOPK, SIGMOID_TOPK: select on c = s (+ bias).
void route_scored(const RoutingConfig& c, const float* logits, const float* bias, int32_t* ids,
                  float* weights) {
  const RowScores s(c.effective_score_function(), logits, c.num_experts);
  TopK top(weights, ids, c.top_k);
  for (int64_t e = 0; e < c.num_experts; ++e) {
    top.offer(bias ? s(e) + bias[e] : s(e), static_cast<int32_t>(e));
  }
  for (int64_t j = 0; j < c.top_k; ++j) weights[j] = s(ids[j]);
}

// GROUPED_TOPK. scratch: 2 * num_groups floats (group scores, kept flags).
void route_grouped(const RoutingConfig& c, const float* logits, const float* bias, int32_t* ids,
                   float* weights, float* scratch) {
  const RowScores s(c.score_function, logits, c.num_experts);
  auto select_score = [&](int64_t e) { return key_of(bias ? s(e) + bias[e] : s(e)); };
  const int64_t groups = c.num_groups;
  const int64_t group_size = c.num_experts / groups;
  float* group_scores = scratch;
  float* kept = scratch + groups;
  for (int64_t g = 0; g < groups; ++g) {
    float best = kNegInf, second = kNegInf;
    for (int64_t e = g * group_size; e < (g + 1) * group_size; ++e) {
      const float v = select_score(e);
      if (v > best) {
        second = best;
        best = v;
      } else if (v > second) {
        second = v;
      }
    }
    switch (c.group_score) {
      case GroupScore::kMax:
        group_scores[g] = best;
        break;
      case GroupScore::kSumTop2:
        group_scores[g] = best + second;
        break;
    }
    kept[g] = 0.0f;
  }
  // A group is kept when fewer than groups_kept groups beat it (a better score, or the same
  // score and a lower index). O(G^2), and G is small (DeepSeek: 8).
  for (int64_t g = 0; g < groups; ++g) {
    int64_t better = 0;
    for (int64_t h = 0; h < groups; ++h) {
      better += group_scores[h] > group_scores[g] || (group_scores[h] == group_scores[g] && h < g);
    }
    if (better < c.groups_kept) kept[g] = 1.0f;
  }
  TopK top(weights, ids, c.top_k);
  for (int64_t e = 0; e < c.num_experts; ++e) {
    top.offer(kept[e / group_size] != 0.0f ? select_score(e) : 0.0f, static_cast<int32_t>(e));
  }
  for (int64_t j = 0; j < c.top_k; ++j) {
    const int32_t e = ids[j];
    // With a bias the weight is the unbiased score; without one it is the (masked) selection
    // score, which HF's DeepSeek-V2 also returns.
    weights[j] = bias ? s(e) : (kept[e / group_size] != 0.0f ? s(e) : 0.0f);
  }
}

// TOPK_SOFTMAX: top-k of the logits, softmax over the k selected.
void route_topk_softmax(const RoutingConfig& c, const float* logits, int32_t* ids, float* weights) {
  TopK top(weights, ids, c.top_k);
  for (int64_t e = 0; e < c.num_experts; ++e) {
    top.offer(sanitize_logit(logits[e]), static_cast<int32_t>(e));
  }
  // weights[] holds the selected (sanitized) logits, best first.
  const float max = weights[0];
  if (max == kNegInf) {
    for (int64_t j = 0; j < c.top_k; ++j) weights[j] = 0.0f;
    return;
  }
  float sum = 0.0f;
  for (int64_t j = 0; j < c.top_k; ++j) {
    weights[j] = std::exp(weights[j] - max);
    sum += weights[j];
  }
  for (int64_t j = 0; j < c.top_k; ++j) weights[j] /= sum;
}

// LLAMA4_TOP1_SIGMOID: top-1 of the logits, weight sigmoid(logit).
void route_llama4(const RoutingConfig& c, const float* logits, int32_t* ids, float* weights) {
  TopK top(weights, ids, 1);
  for (int64_t e = 0; e < c.num_experts; ++e) {
    top.offer(sanitize_logit(logits[e]), static_cast<int32_t>(e));
  }
  weights[0] = sigmoid(weights[0]);
}

void route_row(const RoutingConfig& c, const float* logits, const float* bias, int32_t* ids,
               float* weights, float* scratch) {
  switch (c.method) {
    case RoutingMethod::kSoftmaxTopK:
    case RoutingMethod::kSigmoidTopK:
      route_scored(c, logits, bias, ids, weights);
      break;
    case RoutingMethod::kGroupedTopK:
      route_grouped(c, logits, bias, ids, weights, scratch);
      break;
    case RoutingMethod::kTopKSoftmax:
      route_topk_softmax(c, logits, ids, weights);
      break;
    case RoutingMethod::kLlama4Top1Sigmoid:
      route_llama4(c, logits, ids, weights);
      break;
  }
  renormalize_and_scale(c, weights);
}

int64_t scratch_per_row(const RoutingConfig& c) {
  return c.method == RoutingMethod::kGroupedTopK ? 2 * c.num_groups : 0;
}

}  // namespace

int64_t routing_scratch_floats(const RoutingConfig& config, int64_t rows) {
  return scratch_per_row(config) * rows;
}

void route_rows(const RoutingConfig& config, const float* logits, int64_t rows,
                const float* score_correction_bias, int32_t* ids, float* weights, float* scratch,
                ThreadPool* pool) {
  const float* bias = config.has_score_correction_bias ? score_correction_bias : nullptr;
  MG_ASSERT(!config.has_score_correction_bias || bias != nullptr,
            "routing needs its score-correction bias");
  const int64_t E = config.num_experts, k = config.top_k, per_row = scratch_per_row(config);
  auto rows_fn = [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      route_row(config, logits + t * E, bias, ids + t * k, weights + t * k, scratch + t * per_row);
    }
  };
  if (pool == nullptr) {
    rows_fn(0, rows);
  } else {
    pool->parallel_for(rows, rows_fn, std::max<int64_t>(1, 4096 / std::max<int64_t>(E, 1)));
  }
}

}  // namespace mg
