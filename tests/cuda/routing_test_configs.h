// The routing configurations the CUDA routing tests sweep (moe_routing_cuda_test.cc,
// router_route_cuda_test.cc): every valid method / score / renormalisation / bias / group
// combination for E experts and top-k.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "framework/core/error.h"
#include "ops/moe/config.h"

namespace mg::testing {

// Every valid configuration (RoutingConfig::validate) for E experts and top-k.
inline std::vector<RoutingConfig> all_configs(int64_t E, int64_t k) {
  std::vector<RoutingConfig> out;
  auto add = [&](RoutingConfig c) {
    c.num_experts = E;
    c.top_k = k;
    try {
      c.validate();
    } catch (const Error&) {
      return;
    }
    for (const RoutingConfig& seen : out) {
      if (seen == c) return;
    }
    out.push_back(c);
  };
  for (bool renormalize : {false, true}) {
    for (bool bias : {false, true}) {
      for (float scale : {1.0f, 2.5f}) {
        for (RoutingMethod m : {RoutingMethod::kSoftmaxTopK, RoutingMethod::kSigmoidTopK,
                                RoutingMethod::kTopKSoftmax, RoutingMethod::kLlama4Top1Sigmoid}) {
          RoutingConfig c;
          c.method = m;
          c.renormalize = renormalize;
          c.has_score_correction_bias = bias;
          c.routed_scaling_factor = scale;
          add(c);
        }
        for (ScoreFunction f : {ScoreFunction::kSoftmax, ScoreFunction::kSigmoid}) {
          for (GroupScore g : {GroupScore::kMax, GroupScore::kSumTop2}) {
            for (int64_t groups : {1, 4, 8}) {
              if (E % groups != 0) continue;
              for (int64_t kept : {int64_t{1}, std::max<int64_t>(1, groups / 2), groups}) {
                RoutingConfig c;
                c.method = RoutingMethod::kGroupedTopK;
                c.score_function = f;
                c.group_score = g;
                c.num_groups = groups;
                c.groups_kept = kept;
                c.renormalize = renormalize;
                c.has_score_correction_bias = bias;
                c.routed_scaling_factor = scale;
                add(c);
              }
            }
          }
        }
      }
    }
  }
  return out;
}

}  // namespace mg::testing
