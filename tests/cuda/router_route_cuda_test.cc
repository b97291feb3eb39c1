// The fused router GEMV + routing launch (CudaRouter::gate_and_route with route counters,
// ops/moe/cuda/router_route_cuda.h) against the two launches it replaces (gate() with the GEMV
// forced at every row count, then route()): the logits, ids and weights must be the same bits,
// and the ids / weights those of the CPU routing (route_rows) on the same logits. Every routing
// method the families use (all_configs: softmax / sigmoid top-k, grouped top-k with the
// score-correction bias, top-k-then-softmax, Llama-4 top-1 sigmoid, renormalised or not, scaled)
// at M = 1, 2, 7, E = 8, 60, 128, 256, k = 1..8, with a router bias on every other configuration
// and a row of zeros (all logits tied). Then: which calls fuse (M > 8, unaligned rows,
// MG_FUSED_ROUTE=0 do not), CUDA-graph replays in a row (the arrival counter comes back to 0),
// and (MG_ROUTE_TIMING=1) the timing of both paths in a CUDA graph on the qwen3-30b-a3b shape.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <random>
#include <vector>

#include "framework/device/allocator.h"
#include "framework/device/convert.h"
#include "framework/device/stream.h"
#include "ops/moe/router/routing.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/cuda/routing_test_configs.h"
#ifdef MG_WITH_CUDA
#include "ops/moe/cuda/router_route_cuda.h"
#include "ops/moe/router/router_cuda.h"
#endif

namespace mg {
namespace {

#ifdef MG_WITH_CUDA

using testing::all_configs;
using testing::DeviceBuffer;

std::vector<float> normal(int64_t n, uint32_t seed, float stddev) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, stddev);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(rng);
  return v;
}

Tensor host_f32(const std::vector<float>& v, Shape shape) {
  Tensor t = Tensor::empty_cpu(DType::kF32, std::move(shape));
  std::memcpy(t.raw(), v.data(), v.size() * sizeof(float));
  return t;
}

// One router with its device buffers for up to kRouterRouteMaxRows rows.
struct RouterCase {
  // These tests compare both paths, whatever MG_FUSED_ROUTE says (back as it was afterwards).
  ScopedFusedRoute fused_on{true};
  RoutingConfig config;
  int64_t hidden;
  DType dtype;
  std::vector<float> score_bias;  // [E] (used iff config.has_score_correction_bias)
  std::unique_ptr<CudaRouter> router;
  DeviceBuffer x, logits, ids, weights, counter, blas;
  size_t blas_bytes;

  // `cublas`: a cuBLAS workspace, for calls of more rows than the GEMV takes.
  RouterCase(const RoutingConfig& c, int64_t H, DType dt, uint32_t seed, bool cublas = false)
      : config(c),
        hidden(H),
        dtype(dt),
        score_bias(normal(c.num_experts, seed + 1, 0.1f)),
        x(cuda::kRouterRouteMaxRows * H * 4),
        logits(cuda::kRouterRouteMaxRows * c.num_experts * 4),
        ids(cuda::kRouterRouteMaxRows * c.top_k * 4),
        weights(cuda::kRouterRouteMaxRows * c.top_k * 4),
        counter(4),
        blas(cublas ? cuda::GemmXwt::kWorkspaceBytes : 16),
        blas_bytes(cublas ? cuda::GemmXwt::kWorkspaceBytes : 16) {
    const int64_t E = c.num_experts;
    const Tensor w = host_f32(normal(E * H, seed, 1.0f / std::sqrt(static_cast<float>(H))), {E, H});
    const Tensor router_bias =
        c.has_router_bias ? host_f32(normal(E, seed + 2, 0.5f), {E}) : Tensor();
    const Tensor scb = c.has_score_correction_bias ? host_f32(score_bias, {E}) : Tensor();
    router = std::make_unique<CudaRouter>(
        c, H, dt, to_device_tensor(cast_cpu(w, dt), Device::cuda(0)), router_bias, scb);
    // The two-launch reference takes the GEMV at every row count, so both paths see one set of
    // logits (cuBLAS would sum in another order from 3 rows on).
    router->set_gemv_max_rows(cuda::kGemvMaxRows);
    MG_CUDA_CHECK(cudaMemset(counter.as<void>(), 0, 4));
  }

  // x [M, H] (F32 values) uploaded in the router's dtype.
  void set_x(const std::vector<float>& values, int64_t M) {
    const Tensor t = cast_cpu(host_f32(values, {M, hidden}), dtype);
    x.upload(t.raw(), t.nbytes());
  }

  RouterRun run(Stream* stream, bool fused) {
    return RouterRun{nullptr, stream, blas.as<void>(), blas_bytes,
                     fused ? counter.as<unsigned>() : nullptr};
  }

  struct Result {
    std::vector<float> logits;
    std::vector<int32_t> ids;
    std::vector<float> weights;
    unsigned counter = 0;
  };
  Result download(int64_t M) const {
    Result r;
    r.logits.resize(M * config.num_experts);
    r.ids.resize(M * config.top_k);
    r.weights.resize(M * config.top_k);
    logits.download(r.logits.data(), r.logits.size() * 4);
    ids.download(r.ids.data(), r.ids.size() * 4);
    weights.download(r.weights.data(), r.weights.size() * 4);
    counter.download(&r.counter, 4);
    return r;
  }
  void poison(int64_t M) {
    MG_CUDA_CHECK(cudaMemset(logits.as<void>(), 0xff, M * config.num_experts * 4));
    MG_CUDA_CHECK(cudaMemset(ids.as<void>(), 0xff, M * config.top_k * 4));
    MG_CUDA_CHECK(cudaMemset(weights.as<void>(), 0xff, M * config.top_k * 4));
  }

  // gate_and_route on the default stream, fused or as two launches.
  Result route(int64_t M, bool fused) {
    poison(M);
    const RouterRun rr = run(nullptr, fused);
    EXPECT_EQ(router->fuses_route(x.as<void>(), M, rr), fused);
    router->gate_and_route(x.as<void>(), M, logits.as<void>(), ids.as<int32_t>(),
                           weights.as<float>(), nullptr, rr);
    MG_CUDA_CHECK(cudaDeviceSynchronize());
    return download(M);
  }
};

bool same_bits(const void* a, const void* b, size_t bytes) {
  return std::memcmp(a, b, bytes) == 0;
}

// Fused and two-launch results are the same bits; the ids equal route_rows' on those logits and
// the weights are within 1e-5 relative of its (moe_routing_cuda_test's bound); the counter is 0.
void expect_fused_matches(RouterCase& rc, int64_t M) {
  const RoutingConfig& c = rc.config;
  SCOPED_TRACE(fmt::format("{} router_bias={} {} H={} M={}", c.str(), c.has_router_bias,
                           dtype_name(rc.dtype), rc.hidden, M));
  const RouterCase::Result two = rc.route(M, false);
  const RouterCase::Result one = rc.route(M, true);
  ASSERT_TRUE(same_bits(one.logits.data(), two.logits.data(), two.logits.size() * 4));
  ASSERT_EQ(one.ids, two.ids);
  ASSERT_TRUE(same_bits(one.weights.data(), two.weights.data(), two.weights.size() * 4));
  ASSERT_EQ(one.counter, 0u);

  const int64_t k = c.top_k;
  std::vector<int32_t> ids(M * k);
  std::vector<float> weights(M * k);
  std::vector<float> scratch(std::max<int64_t>(1, routing_scratch_floats(c, M)));
  route_rows(c, two.logits.data(), M, c.has_score_correction_bias ? rc.score_bias.data() : nullptr,
             ids.data(), weights.data(), scratch.data(), nullptr);
  for (int64_t i = 0; i < M * k; ++i) {
    ASSERT_EQ(one.ids[i], ids[i]) << "row " << i / k << " slot " << i % k;
    ASSERT_NEAR(one.weights[i], weights[i], 1e-5 * std::fabs(weights[i]))
        << "row " << i / k << " slot " << i % k;
  }
}

// x [M, H] normal, with row 3 (when there is one) all zeros: its logits are the router bias or
// all 0 (every expert tied).
std::vector<float> x_with_zero_row(int64_t M, int64_t H, uint32_t seed) {
  std::vector<float> x = normal(M * H, seed, 1.0f);
  if (M > 3) std::fill(x.begin() + 3 * H, x.begin() + 4 * H, 0.0f);
  return x;
}

TEST(RouterRouteCuda, FusedMatchesTwoLaunchesForEveryMethod) {
  MG_REQUIRE_GPU();
  constexpr int64_t kHidden = 256;
  uint32_t seed = 100;
  for (int64_t E : {8, 60, 128, 256}) {
    for (int64_t k = 1; k <= 8; ++k) {
      if (k > E) continue;
      int n = 0;
      for (RoutingConfig c : all_configs(E, k)) {
        c.has_router_bias = ++n % 2 == 0;
        RouterCase rc(c, kHidden, DType::kBF16, seed += 3);
        for (int64_t M : {1, 2, 7}) {
          rc.set_x(x_with_zero_row(M, kHidden, ++seed), M);
          expect_fused_matches(rc, M);
          if (::testing::Test::HasFatalFailure()) return;
        }
      }
    }
  }
}

// F32 and F16 activations, the qwen3-30b-a3b router shape and every row count the kernel takes.
TEST(RouterRouteCuda, FusedMatchesTwoLaunchesInEveryDtypeAndRowCount) {
  MG_REQUIRE_GPU();
  uint32_t seed = 900;
  for (DType dt : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (const RoutingConfig& c : all_configs(128, 8)) {
      RouterCase rc(c, 2048, dt, seed += 3);
      for (int64_t M = 1; M <= cuda::kRouterRouteMaxRows; ++M) {
        rc.set_x(x_with_zero_row(M, 2048, ++seed), M);
        expect_fused_matches(rc, M);
        if (::testing::Test::HasFatalFailure()) return;
      }
    }
  }
}

// A single row whose logits all tie (x = 0, no router bias): ties go to the lower expert.
TEST(RouterRouteCuda, AllTiedRow) {
  MG_REQUIRE_GPU();
  for (const RoutingConfig& c : all_configs(64, 4)) {
    RouterCase rc(c, 512, DType::kBF16, 7);
    rc.set_x(std::vector<float>(512, 0.0f), 1);
    expect_fused_matches(rc, 1);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

TEST(RouterRouteCuda, WhichCallsFuse) {
  MG_REQUIRE_GPU();
  RoutingConfig c;
  c.num_experts = 128;
  c.top_k = 8;
  c.renormalize = true;
  RouterCase rc(c, 2048, DType::kBF16, 11);
  const RouterRun fused = rc.run(nullptr, true);
  EXPECT_TRUE(rc.router->fuses_route(rc.x.as<void>(), 1, fused));
  EXPECT_TRUE(rc.router->fuses_route(rc.x.as<void>(), cuda::kRouterRouteMaxRows, fused));
  // More rows, no counters, a misaligned x, the switch off: two launches.
  EXPECT_FALSE(rc.router->fuses_route(rc.x.as<void>(), cuda::kRouterRouteMaxRows + 1, fused));
  EXPECT_FALSE(rc.router->fuses_route(rc.x.as<void>(), 1, rc.run(nullptr, false)));
  EXPECT_FALSE(rc.router->fuses_route(rc.x.as<char>() + 2, 1, fused));
  {
    const ScopedFusedRoute off(false);
    EXPECT_FALSE(rc.router->fuses_route(rc.x.as<void>(), 1, fused));
  }
  rc.router->set_fused_max_rows(0);
  EXPECT_FALSE(rc.router->fuses_route(rc.x.as<void>(), 1, fused));

  // Rows that are not 16-byte multiples (H = 100 in BF16) take cuBLAS and the routing kernel.
  RouterCase odd(c, 100, DType::kBF16, 12);
  EXPECT_FALSE(odd.router->fuses_route(odd.x.as<void>(), 1, odd.run(nullptr, true)));

  EXPECT_FALSE(fused_route_requested_by(nullptr));
  EXPECT_TRUE(fused_route_requested_by("1"));
  EXPECT_FALSE(fused_route_requested_by("0"));
  EXPECT_THROW(fused_route_requested_by("yes"), Error);
}

// Captured once, replayed twice on one x and once on another: every replay routes like the two
// launches, and leaves the arrival counter at 0 for the next.
TEST(RouterRouteCuda, GraphReplaysInARow) {
  MG_REQUIRE_GPU();
  RoutingConfig c;  // Qwen3-30B-A3B: softmax top-8 of 128, renormalised
  c.num_experts = 128;
  c.top_k = 8;
  c.renormalize = true;
  RouterCase rc(c, 2048, DType::kBF16, 21);
  const std::vector<float> x1 = normal(2048, 22, 1.0f), x2 = normal(2048, 23, 1.0f);
  rc.set_x(x2, 1);
  const RouterCase::Result want2 = rc.route(1, false);
  rc.set_x(x1, 1);
  const RouterCase::Result want1 = rc.route(1, false);

  std::unique_ptr<Stream> stream = make_stream(Device::cuda(0));
  const cudaStream_t s = cuda::native(stream.get());
  const RouterRun rr = rc.run(stream.get(), true);
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  MG_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  rc.router->gate_and_route(rc.x.as<void>(), 1, rc.logits.as<void>(), rc.ids.as<int32_t>(),
                            rc.weights.as<float>(), nullptr, rr);
  MG_CUDA_CHECK(cudaStreamEndCapture(s, &graph));
  MG_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  auto replay = [&](const std::vector<float>& x, const RouterCase::Result& want, int i) {
    SCOPED_TRACE(fmt::format("replay {}", i));
    rc.set_x(x, 1);
    rc.poison(1);
    MG_CUDA_CHECK(cudaDeviceSynchronize());  // the legacy stream's copy and memsets before `s`
    MG_CUDA_CHECK(cudaGraphLaunch(exec, s));
    MG_CUDA_CHECK(cudaStreamSynchronize(s));
    const RouterCase::Result got = rc.download(1);
    EXPECT_EQ(got.ids, want.ids);
    EXPECT_TRUE(same_bits(got.weights.data(), want.weights.data(), want.weights.size() * 4));
    EXPECT_TRUE(same_bits(got.logits.data(), want.logits.data(), want.logits.size() * 4));
    EXPECT_EQ(got.counter, 0u);
  };
  replay(x1, want1, 0);
  replay(x1, want1, 1);
  replay(x2, want2, 2);
  MG_CUDA_CHECK(cudaGraphExecDestroy(exec));
  MG_CUDA_CHECK(cudaGraphDestroy(graph));
}

// Microseconds per gate + route at M rows on the qwen3-30b-a3b router (H 2048, E 128, top-8
// softmax renormalised, BF16), captured in a CUDA graph of kCalls calls (host launch costs out,
// as a decode step runs): fused, and the two launches (the GEMV or cuBLAS as GemmXwt chooses).
// Prints only:
//   MG_ROUTE_TIMING=1 build/tests/mg_cuda_tests --gtest_filter='RouterRouteCuda.Timing*'
TEST(RouterRouteCuda, TimingQwen3Router) {
  MG_REQUIRE_GPU();
  if (std::getenv("MG_ROUTE_TIMING") == nullptr) GTEST_SKIP() << "set MG_ROUTE_TIMING=1 to time";
  constexpr int kCalls = 50;
  RoutingConfig c;
  c.num_experts = 128;
  c.top_k = 8;
  c.renormalize = true;
  RouterCase rc(c, 2048, DType::kBF16, 31, /*cublas=*/true);
  rc.router->set_gemv_max_rows(cuda::gemv_chosen_rows(c.num_experts));  // GemmXwt's own rule
  std::unique_ptr<Stream> stream = make_stream(Device::cuda(0));
  const cudaStream_t s = cuda::native(stream.get());
  auto time_us = [&](int64_t M, bool fused) {
    const RouterRun rr = rc.run(stream.get(), fused);
    auto calls = [&] {
      for (int i = 0; i < kCalls; ++i) {
        rc.router->gate_and_route(rc.x.as<void>(), M, rc.logits.as<void>(), rc.ids.as<int32_t>(),
                                  rc.weights.as<float>(), nullptr, rr);
      }
    };
    calls();  // plans cuBLAS outside the capture
    MG_CUDA_CHECK(cudaStreamSynchronize(s));
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    MG_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    calls();
    MG_CUDA_CHECK(cudaStreamEndCapture(s, &graph));
    MG_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    const double us = 1000.0 * testing::median_graph_replay_ms(exec, s, 20) / kCalls;
    MG_CUDA_CHECK(cudaGraphExecDestroy(exec));
    MG_CUDA_CHECK(cudaGraphDestroy(graph));
    return us;
  };
  for (int64_t M : {1, 2, 4, 8}) {
    rc.set_x(normal(M * 2048, 32, 1.0f), M);
    MG_CUDA_CHECK(cudaDeviceSynchronize());
    const double two = time_us(M, false), one = time_us(M, true);
    std::cout << fmt::format(
        "router + route, qwen3-30b-a3b, M={}: two launches {:6.2f} us, fused "
        "{:6.2f} us ({:.2f}x)\n",
        M, two, one, two / one);
  }
}

#endif  // MG_WITH_CUDA

}  // namespace
}  // namespace mg
