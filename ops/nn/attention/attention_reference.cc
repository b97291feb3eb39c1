#include <algorithm>
#include <cmath>
#include <vector>

#include "framework/core/error.h"
#include "ops/nn/attention/attention.h"

namespace mg {

void attention_reference(const proto::AttentionParams& params, const float* q,
                         const int32_t* positions, int64_t tokens, const float* k_seq,
                         const float* v_seq, int64_t seq_len, const float* sinks, float* out) {
  const int64_t heads = params.num_heads();
  const int64_t kv_heads = params.num_kv_heads();
  const int64_t d = params.head_dim();
  const int64_t dv = params.v_head_dim() == 0 ? d : params.v_head_dim();
  const double scale =
      params.has_scale() ? params.scale() : 1.0 / std::sqrt(static_cast<double>(d));
  const int64_t window = params.sliding_window();
  const int64_t chunk = params.chunk_size();
  const int64_t group = heads / kv_heads;

  for (int64_t t = 0; t < tokens; ++t) {
    const int64_t p = positions[t];
    MG_CHECK(p >= 0 && p < seq_len, "attention reference: position {} outside [0, {})", p, seq_len);
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t g = h / group;
      // Logits of the visible keys, plus the sink as one more logit whose value is dropped.
      std::vector<double> logits;
      std::vector<int64_t> keys;
      for (int64_t j = 0; j < seq_len; ++j) {
        bool visible = j <= p;
        if (window > 0 && !(j > p - window)) visible = false;
        if (chunk > 0 && j / chunk != p / chunk) visible = false;
        if (!visible) continue;
        double dot = 0.0;
        for (int64_t i = 0; i < d; ++i) {
          dot += static_cast<double>(q[(t * heads + h) * d + i]) *
                 static_cast<double>(k_seq[(j * kv_heads + g) * d + i]);
        }
        logits.push_back(dot * scale);
        keys.push_back(j);
      }
      double row_max = sinks ? static_cast<double>(sinks[h]) : -INFINITY;
      for (double s : logits) row_max = std::max(row_max, s);
      double denom = sinks ? std::exp(static_cast<double>(sinks[h]) - row_max) : 0.0;
      for (double s : logits) denom += std::exp(s - row_max);
      for (int64_t i = 0; i < dv; ++i) {
        double acc = 0.0;
        for (size_t n = 0; n < keys.size(); ++n) {
          acc += std::exp(logits[n] - row_max) / denom *
                 static_cast<double>(v_seq[(keys[n] * kv_heads + g) * dv + i]);
        }
        out[(t * heads + h) * dv + i] = static_cast<float>(acc);
      }
    }
  }
}

}  // namespace mg
