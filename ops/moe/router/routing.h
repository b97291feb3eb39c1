// Routing: router logits [M, E] -> top-k expert ids [M, k] (int32) and weights [M, k] (fp32).
//
// Every method of RoutingConfig (formulas in proto/model.proto, MoERoutingMethod), computed in
// fp32 and matching Hugging Face transformers:
//   scores   s = softmax(l) | sigmoid(l) over the E logits of a row (TOPK_SOFTMAX and Llama-4
//                select on the logits themselves)
//   select   c = s + score_correction_bias (selection only); GROUPED_TOPK keeps the best
//                groups_kept groups and sets c = 0.0 elsewhere (HF's masked_fill value)
//   ids      top-k of c, best first
//   weights  s[ids] with a bias, else c[ids]; TOPK_SOFTMAX: softmax over the k selected logits;
//            Llama-4: sigmoid(l[id]); then renormalise (w / (sum w + 1e-20)) if asked and
//            multiply by routed_scaling_factor.
//
// Rules for awkward inputs, the same in every method:
//   - ties: the lower expert (or group) index wins, so results never depend on timing;
//   - NaN logits count as -inf, +inf logits as the largest float (softmax shares the mass
//     equally between them);
//   - a row without a finite logit gives scores 0: it picks experts 0..k-1 (lowest ids first)
//     with weight 0; a softmax over only -inf values is 0, not NaN;
//   - a NaN selection score (e.g. from a NaN bias) counts as -inf.
#pragma once

#include <cstdint>

#include "ops/moe/config.h"

namespace mg {

class ThreadPool;

// Floats of scratch route_rows needs for `rows` rows.
int64_t routing_scratch_floats(const RoutingConfig& config, int64_t rows);

// logits [rows, E] -> ids, weights [rows, k]. `score_correction_bias` [E] is read iff
// config.has_score_correction_bias. `scratch` holds routing_scratch_floats(config, rows) floats.
// Parallel over rows on `pool` (may be null).
void route_rows(const RoutingConfig& config, const float* logits, int64_t rows,
                const float* score_correction_bias, int32_t* ids, float* weights, float* scratch,
                ThreadPool* pool);

}  // namespace mg
