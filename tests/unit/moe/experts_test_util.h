// Experts test problems shared by the unit and slow suites.
#pragma once

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "ops/moe/experts/cpu_batched_experts.h"
#include "ops/moe/kernel/prepare_finalize_none.h"
#include "ops/moe/reference/moe_reference.h"
#include "tests/unit/moe/moe_test_util.h"

namespace mg::moe_test {

struct Problem {
  MoEConfig config;
  ExpertsShape shape;
  CanonicalExpertWeights weights;
  std::vector<float> x;
  int64_t tokens;
  std::vector<int32_t> ids;
  std::vector<float> topk_weights;
};

inline Problem make_problem(int64_t E, int64_t k, int64_t H, int64_t I, int64_t M,
                            MoEActivation act, IdPattern pattern, bool biases, uint32_t seed,
                            RoutingMethod method = RoutingMethod::kSoftmaxTopK) {
  MoEConfig config = experts_config(E, k, H, I, act, biases, method);
  ExpertsShape shape = local_experts_shape(config, ParallelConfig());
  Problem p{config,
            shape,
            random_weights(config, seed),
            testing::random_floats(static_cast<size_t>(M * H), seed + 10),
            M,
            {},
            {}};
  random_routing(M, E, k, pattern, seed + 20, p.ids, p.topk_weights);
  return p;
}

inline std::vector<float> reference_out(const Problem& p) {
  return reference::experts(p.config, p.x, p.tokens, p.ids, p.topk_weights, p.weights.w13,
                            p.weights.w13_bias, p.weights.w2, p.weights.w2_bias);
}

inline FusedMoEKernel make_kernel(const ExpertsBackend& backend, const Problem& p) {
  ExpertsBuild build{p.config, p.shape, Device::cpu(), clone(p.weights), Tensor()};
  return FusedMoEKernel(std::make_unique<PrepareFinalizeNone>(p.shape, false),
                        backend.create(std::move(build)));
}

inline void expect_close(const std::vector<float>& got, const std::vector<float>& want,
                         const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  if (want.empty()) return;
  EXPECT_LE(testing::normalized_error(got, want), kTolerance) << what;
}

// Batched experts without a prepare/finalize: bucket the (token, expert) pairs into slabs the
// way all_to_all does on one rank, run, and weight-sum the rows back.
inline std::vector<float> run_batched(const Problem& p, ThreadPool* pool) {
  ExpertsBuild build{p.config, p.shape, Device::cpu(), clone(p.weights), Tensor()};
  std::unique_ptr<Experts> experts = cpu_batched_backend().create(std::move(build));
  const int64_t E = p.shape.num_local_experts(), H = p.shape.hidden_size, k = p.shape.top_k;
  const int64_t T = std::max<int64_t>(p.tokens, 1);
  std::vector<float> slabs(static_cast<size_t>(E * T * H)), outs(slabs.size());
  std::vector<int32_t> counts(static_cast<size_t>(E), 0), slot(p.ids.size());
  for (int64_t r = 0; r < p.tokens * k; ++r) {
    const int32_t e = p.ids[r];
    slot[r] = static_cast<int32_t>(e * T + counts[e]++);
    std::copy_n(p.x.begin() + (r / k) * H, H, slabs.begin() + slot[r] * H);
  }
  DispatchedTokens t;
  t.format = ActivationFormat::kBatched;
  t.hidden = slabs.data();
  t.expert_num_tokens = counts.data();
  t.max_tokens_per_expert = T;
  t.expert_output = outs.data();
  std::vector<uint8_t> ws_buf(experts->workspace_bytes(T));
  Workspace ws(ws_buf.data(), ws_buf.size());
  static_cast<ExpertsModular&>(*experts).apply(t, ws, MoEExecContext{pool});
  std::vector<float> out(static_cast<size_t>(p.tokens * H), 0.0f);
  for (int64_t r = 0; r < p.tokens * k; ++r) {
    for (int64_t h = 0; h < H; ++h) {
      out[(r / k) * H + h] += p.topk_weights[r] * outs[slot[r] * H + h];
    }
  }
  return out;
}

}  // namespace mg::moe_test
