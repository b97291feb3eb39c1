// Helpers shared by the MoE test suites (unit and slow).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "framework/core/error.h"
#include "framework/core/thread_pool.h"
#include "ops/moe/config.h"
#include "ops/moe/kernel/expert_weights.h"
#include "ops/moe/kernel/fused_moe_kernel.h"
#include "ops/moe/kernel/moe_types.h"
#include "tests/testing/test_util.h"

// Expects `stmt` to throw mg::Error whose message contains `substr`.
#define EXPECT_MG_ERROR(stmt, substr)                                          \
  do {                                                                         \
    try {                                                                      \
      stmt;                                                                    \
      ADD_FAILURE() << "expected mg::Error containing '" << (substr) << "'";   \
    } catch (const ::mg::Error& e) {                                           \
      EXPECT_NE(std::string(e.what()).find(substr), std::string::npos)         \
          << "message: " << e.what() << "\nexpected to contain: " << (substr); \
    }                                                                          \
  } while (false)

namespace mg::moe_test {

inline constexpr double kTolerance = 1e-5;  // fp32 normalised error

inline const MoEActivation kAllActivations[] = {
    MoEActivation::kSiluGated, MoEActivation::kGeluGated,   MoEActivation::kGeluTanhGated,
    MoEActivation::kSwigluOai, MoEActivation::kReluSquared, MoEActivation::kSilu,
    MoEActivation::kGelu,
};

// A layer config for tests that feed ids/weights directly (routing only sizes them).
inline MoEConfig experts_config(int64_t experts, int64_t k, int64_t hidden, int64_t inter,
                                MoEActivation act, bool biases = false,
                                RoutingMethod method = RoutingMethod::kSoftmaxTopK) {
  MoEConfig::Fields f;
  f.routing.method = method;
  f.routing.num_experts = experts;
  f.routing.top_k = k;
  f.hidden_size = hidden;
  f.intermediate_size = inter;
  f.activation.kind = act;
  // A tighter limit than GPT-OSS's 7 so that the random values reach the clamps.
  f.activation.swiglu_limit = 0.6f;
  f.has_w13_bias = biases;
  f.has_w2_bias = biases;
  return MoEConfig(f);
}

// Random canonical weights for every expert of `config` (single rank).
inline CanonicalExpertWeights random_weights(const MoEConfig& c, uint32_t seed) {
  const int64_t E = c.num_experts(), N1 = c.w13_rows(), H = c.hidden_size();
  const int64_t I = c.intermediate_size();
  CanonicalExpertWeights w;
  // Scaled so that activations stay O(1) whatever H and I are.
  const float s13 = 2.0f / std::sqrt(static_cast<float>(H));
  const float s2 = 2.0f / std::sqrt(static_cast<float>(I));
  w.w13 = testing::random_tensor({E, N1, H}, seed, -s13, s13);
  w.w2 = testing::random_tensor({E, H, I}, seed + 1, -s2, s2);
  if (c.has_w13_bias()) w.w13_bias = testing::random_tensor({E, N1}, seed + 2, -0.5f, 0.5f);
  if (c.has_w2_bias()) w.w2_bias = testing::random_tensor({E, H}, seed + 3, -0.5f, 0.5f);
  return w;
}

enum class IdPattern {
  kRandom,    // k distinct random experts per token
  kAllToOne,  // every token picks experts 0..k-1: expert 0 receives all tokens, most none
};

// ids [M, k] (distinct per token) and positive weights [M, k].
inline void random_routing(int64_t M, int64_t E, int64_t k, IdPattern pattern, uint32_t seed,
                           std::vector<int32_t>& ids, std::vector<float>& weights) {
  std::mt19937 rng(seed);
  ids.resize(static_cast<size_t>(M * k));
  weights = testing::random_floats(static_cast<size_t>(M * k), seed + 7, 0.1f, 1.0f);
  std::vector<int32_t> perm(static_cast<size_t>(E));
  for (int64_t t = 0; t < M; ++t) {
    for (int64_t e = 0; e < E; ++e) perm[e] = static_cast<int32_t>(e);
    if (pattern == IdPattern::kRandom) std::shuffle(perm.begin(), perm.end(), rng);
    for (int64_t j = 0; j < k; ++j) ids[t * k + j] = perm[j];
  }
}

// Copies of tensors (so that each backend owns what it converts).
inline CanonicalExpertWeights clone(const CanonicalExpertWeights& w) {
  auto copy = [](const Tensor& t) {
    if (!t.defined()) return Tensor();
    Tensor c = Tensor::empty_cpu(t.dtype(), t.shape());
    std::memcpy(c.raw(), t.raw(), t.nbytes());
    return c;
  };
  return {copy(w.w13), copy(w.w13_bias), copy(w.w2), copy(w.w2_bias)};
}

// Runs `kernel` once (modular from ids/weights, monolithic from logits) with guard bytes after
// the output and the workspace, and checks that they are untouched.
inline std::vector<float> run_kernel(FusedMoEKernel& kernel, int64_t H, const std::vector<float>& x,
                                     int64_t M, const std::vector<int32_t>& ids,
                                     const std::vector<float>& weights,
                                     const std::vector<float>& logits, ThreadPool* pool,
                                     Communicator* comm = nullptr) {
  constexpr size_t kGuard = 64;
  constexpr uint8_t kGuardByte = 0xA5;
  const size_t ws_bytes = kernel.workspace_bytes(M);
  std::vector<uint8_t> ws_buf(ws_bytes + kGuard, kGuardByte);
  std::vector<float> out(static_cast<size_t>(M * H) + kGuard, std::nanf(""));
  const float guard_value = -12345.0f;
  std::fill(out.begin() + M * H, out.end(), guard_value);
  Workspace ws(ws_buf.data(), ws_bytes);
  PrepareArgs args;
  args.hidden = x.data();
  args.num_tokens = M;
  args.topk_ids = ids.data();
  args.topk_weights = weights.data();
  args.router_logits = logits.data();
  args.out = out.data();
  MoEExecContext ctx;
  ctx.pool = pool;
  ctx.comm = comm;
  if (kernel.is_monolithic()) {
    kernel.apply_monolithic(args, ws, ctx);
  } else {
    kernel.apply(args, ws, ctx);
  }
  for (size_t i = ws_bytes; i < ws_buf.size(); ++i) {
    EXPECT_EQ(ws_buf[i], kGuardByte) << "workspace overrun at byte " << i << " of " << ws_bytes;
  }
  for (size_t i = static_cast<size_t>(M * H); i < out.size(); ++i) {
    EXPECT_EQ(out[i], guard_value) << "output overrun";
  }
  out.resize(static_cast<size_t>(M * H));
  return out;
}

}  // namespace mg::moe_test
