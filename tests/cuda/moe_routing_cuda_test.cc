// launch_moe_route (ops/moe/cuda/moe_routing_cuda.h) against the CPU routing route_rows: every
// valid method / score / renormalisation / bias / group combination, E in {8, 64, 128, 256},
// k in {1, 2, 4, 8}, 1..1000 rows, in F32, F16 and BF16. Logits are normal (never zero) and
// rounded through the dtype first, so both sides see the same values; ids must be equal and
// weights within 1e-5 relative. Then rows with NaN, +-inf, no finite logit and exact ties.
#include <gtest/gtest.h>

#ifdef MG_WITH_CUDA  // the CUDA headers exist only where the toolkit is installed
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#endif

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "framework/core/thread_pool.h"
#include "ops/moe/router/routing.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/cuda/routing_test_configs.h"
#ifdef MG_WITH_CUDA
#include "ops/moe/cuda/moe_routing_cuda.h"
#include "ops/moe/router/router_cuda.h"
#endif

namespace mg {
namespace {

#ifdef MG_WITH_CUDA

using testing::all_configs;
using testing::DeviceBuffer;

enum class Elem { kF32, kF16, kBF16 };

const char* elem_name(Elem e) {
  switch (e) {
    case Elem::kF32:
      return "f32";
    case Elem::kF16:
      return "f16";
    case Elem::kBF16:
      return "bf16";
  }
  return "?";
}

float round_to(float v, Elem e) {
  switch (e) {
    case Elem::kF32:
      return v;
    case Elem::kF16:
      return __half2float(__float2half_rn(v));
    case Elem::kBF16:
      return __bfloat162float(__float2bfloat16_rn(v));
  }
  return v;
}

// The logits as the kernel's element type, bytes ready for upload.
std::vector<char> encode(const std::vector<float>& v, Elem e) {
  const size_t size = e == Elem::kF32 ? 4 : 2;
  std::vector<char> out(v.size() * size);
  for (size_t i = 0; i < v.size(); ++i) {
    if (e == Elem::kF32) std::memcpy(&out[i * size], &v[i], size);
    if (e == Elem::kF16) {
      const __half h = __float2half_rn(v[i]);
      std::memcpy(&out[i * size], &h, size);
    }
    if (e == Elem::kBF16) {
      const __nv_bfloat16 h = __float2bfloat16_rn(v[i]);
      std::memcpy(&out[i * size], &h, size);
    }
  }
  return out;
}

// Normal values rounded through `e`, never zero.
std::vector<float> normal_values(int64_t n, uint32_t seed, Elem e, float stddev = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, stddev);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) {
    do {
      x = round_to(normal(rng), e);
    } while (x == 0.0f);
  }
  return v;
}

// Routes `logits` (rounded through `elem`) on the GPU and with route_rows; ids equal, weights
// within 1e-5 relative.
void expect_same_routing(const RoutingConfig& c, const std::vector<float>& logits, int64_t rows,
                         const std::vector<float>& bias, Elem elem, ThreadPool* pool) {
  SCOPED_TRACE(c.str() + " " + elem_name(elem) + " rows=" + std::to_string(rows));
  const int64_t k = c.top_k;
  std::vector<int32_t> ids(rows * k);
  std::vector<float> weights(rows * k);
  std::vector<float> scratch(std::max<int64_t>(1, routing_scratch_floats(c, rows)));
  route_rows(c, logits.data(), rows, bias.data(), ids.data(), weights.data(), scratch.data(), pool);

  const std::vector<char> bytes = encode(logits, elem);
  DeviceBuffer d_logits(bytes.size()), d_bias(bias.size() * sizeof(float));
  DeviceBuffer d_ids(ids.size() * sizeof(int32_t)), d_weights(weights.size() * sizeof(float));
  d_logits.upload(bytes.data(), bytes.size());
  d_bias.upload(bias.data(), bias.size() * sizeof(float));
  MG_CUDA_CHECK(cudaMemset(d_ids.as<void>(), 0xff, ids.size() * sizeof(int32_t)));
  MG_CUDA_CHECK(cudaMemset(d_weights.as<void>(), 0xff, weights.size() * sizeof(float)));
  const cuda::RouteParams p = route_params(c);
  const float* b = c.has_score_correction_bias ? d_bias.as<float>() : nullptr;
  switch (elem) {
    case Elem::kF32:
      cuda::launch_moe_route<float>(p, d_logits.as<void>(), rows, b, d_ids.as<int32_t>(),
                                    d_weights.as<float>(), nullptr);
      break;
    case Elem::kF16:
      cuda::launch_moe_route<__half>(p, d_logits.as<void>(), rows, b, d_ids.as<int32_t>(),
                                     d_weights.as<float>(), nullptr);
      break;
    case Elem::kBF16:
      cuda::launch_moe_route<__nv_bfloat16>(p, d_logits.as<void>(), rows, b, d_ids.as<int32_t>(),
                                            d_weights.as<float>(), nullptr);
      break;
  }
  MG_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<int32_t> gpu_ids(ids.size());
  std::vector<float> gpu_weights(weights.size());
  d_ids.download(gpu_ids.data(), gpu_ids.size() * sizeof(int32_t));
  d_weights.download(gpu_weights.data(), gpu_weights.size() * sizeof(float));
  for (int64_t i = 0; i < rows * k; ++i) {
    ASSERT_EQ(gpu_ids[i], ids[i]) << "row " << i / k << " slot " << i % k;
    ASSERT_NEAR(gpu_weights[i], weights[i], 1e-5 * std::fabs(weights[i]))
        << "row " << i / k << " slot " << i % k;
  }
}

TEST(MoERoutingCuda, MatchesRouteRowsForEveryMethod) {
  MG_REQUIRE_GPU();
  ThreadPool pool(0);
  uint32_t seed = 4000;
  for (Elem elem : {Elem::kF32, Elem::kF16, Elem::kBF16}) {
    for (int64_t E : {8, 64, 128, 256}) {
      for (int64_t k : {1, 2, 4, 8}) {
        if (k > E) continue;
        for (const RoutingConfig& c : all_configs(E, k)) {
          const std::vector<float> bias = normal_values(E, ++seed, Elem::kF32, 0.1f);
          for (int64_t rows : {1, 7, 64, 1000}) {
            expect_same_routing(c, normal_values(rows * E, ++seed, elem), rows, bias, elem, &pool);
            if (::testing::Test::HasFatalFailure()) return;
          }
        }
      }
    }
  }
}

// Experts of other sizes: not a multiple of the 16-byte vector (60), several chunks per lane.
TEST(MoERoutingCuda, MatchesRouteRowsForOddAndLargeExpertCounts) {
  MG_REQUIRE_GPU();
  ThreadPool pool(0);
  uint32_t seed = 5000;
  for (Elem elem : {Elem::kF32, Elem::kBF16}) {
    for (int64_t E : {3, 60, 160, 384, 1024}) {
      for (const RoutingConfig& c : all_configs(E, std::min<int64_t>(E, 6))) {
        const std::vector<float> bias = normal_values(E, ++seed, Elem::kF32, 0.1f);
        expect_same_routing(c, normal_values(33 * E, ++seed, elem), 33, bias, elem, &pool);
        if (::testing::Test::HasFatalFailure()) return;
      }
    }
  }
}

// NaN counts as -inf, +inf as the largest float, a row without a finite logit picks 0..k-1 with
// weight 0, ties go to the lower index; with a bias holding NaN and -inf too.
TEST(MoERoutingCuda, MatchesRouteRowsOnAwkwardRows) {
  MG_REQUIRE_GPU();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  constexpr int kRows = 12;
  uint32_t seed = 6000;
  for (Elem elem : {Elem::kF32, Elem::kF16, Elem::kBF16}) {
    for (int64_t E : {8, 64, 256}) {
      for (int64_t k : {1, 2, 4, 8}) {
        if (k > E) continue;
        for (const RoutingConfig& c : all_configs(E, k)) {
          std::vector<float> l = normal_values(kRows * E, ++seed, elem);
          auto row = [&](int r) { return &l[r * E]; };
          row(0)[1] = nan;
          row(0)[E - 1] = nan;
          row(1)[E / 2] = inf;
          row(2)[0] = inf;
          row(2)[E - 1] = inf;
          for (int64_t e = 0; e < E; ++e) {
            row(3)[e] = -inf;                // no finite logit
            row(4)[e] = nan;                 // likewise
            row(5)[e] = e % 2 ? nan : -inf;  // one finite, at the end
            row(6)[e] = 0.25f;               // all tied
            row(7)[e] = round_to(static_cast<float>((e * 7) % 5) * 0.5f, elem);  // tied pairs
            row(8)[e] = round_to(30.0f + static_cast<float>(e % 3), elem);       // sigmoid = 1
            row(9)[e] = e % 2 ? -0.0f : 0.0f;                                    // -0 ties +0
            row(10)[e] = e % 3 ? -inf : 1.0f;
            row(11)[e] = round_to(-100.0f - static_cast<float>(e), elem);  // exp underflows
          }
          row(5)[E - 1] = 0.5f;
          expect_same_routing(c, l, kRows, normal_values(E, ++seed, Elem::kF32, 0.1f), elem,
                              nullptr);
          std::vector<float> awkward_bias(E, 0.0f);
          awkward_bias[0] = nan;
          awkward_bias[E - 1] = -inf;
          if (E > 2) awkward_bias[2] = 1.0f;
          expect_same_routing(c, l, kRows, awkward_bias, elem, nullptr);
          if (::testing::Test::HasFatalFailure()) return;
        }
      }
    }
  }
}

// Written out by hand: DeepSeek-V3-like grouped routing of one row, 8 experts in 4 groups of 2,
// 2 groups kept by top-2 sum, sigmoid scores, a bias, k = 2, renormalised and scaled by 2.
TEST(MoERoutingCuda, GroupedTopKByHand) {
  MG_REQUIRE_GPU();
  RoutingConfig c;
  c.method = RoutingMethod::kGroupedTopK;
  c.score_function = ScoreFunction::kSigmoid;
  c.group_score = GroupScore::kSumTop2;
  c.num_experts = 8;
  c.top_k = 2;
  c.num_groups = 4;
  c.groups_kept = 2;
  c.renormalize = true;
  c.has_score_correction_bias = true;
  c.routed_scaling_factor = 2.0f;
  // sigmoid(0) = 0.5. Scores + bias per group: {0.5, 0.5} {0.5+0.4, 0.5} {0.5, 0.5+0.3} {0.5,
  // 0.5}: group sums 1.0, 1.4, 1.3, 1.0 -> groups 1 and 2 kept; selection keys 0.9 (expert 2),
  // 0.8 (expert 5); weights are the unbiased 0.5 each, renormalised to 0.5, scaled to 1.0.
  const std::vector<float> logits(8, 0.0f);
  const std::vector<float> bias = {0.0f, 0.0f, 0.4f, 0.0f, 0.0f, 0.3f, 0.0f, 0.0f};
  DeviceBuffer d_logits(8 * sizeof(float)), d_bias(8 * sizeof(float)), d_ids(8), d_w(8);
  d_logits.upload(logits.data(), 8 * sizeof(float));
  d_bias.upload(bias.data(), 8 * sizeof(float));
  cuda::launch_moe_route<float>(route_params(c), d_logits.as<void>(), 1, d_bias.as<float>(),
                                d_ids.as<int32_t>(), d_w.as<float>(), nullptr);
  int32_t ids[2];
  float w[2];
  d_ids.download(ids, sizeof(ids));
  d_w.download(w, sizeof(w));
  EXPECT_EQ(ids[0], 2);
  EXPECT_EQ(ids[1], 5);
  EXPECT_FLOAT_EQ(w[0], 1.0f);
  EXPECT_FLOAT_EQ(w[1], 1.0f);
}

#endif  // MG_WITH_CUDA

}  // namespace
}  // namespace mg
