// launch_moe_align / launch_moe_gather / launch_moe_combine / launch_moe_scale_input
// (ops/moe/cuda/moe_align_cuda.h) against a plain host computation: counts and offsets, every
// pair's row inside its expert's range, rows a permutation of the local pairs; gathered rows
// equal; combine within the dtype's tolerance. Experts all local and partly local (an EP rank),
// from 1 pair (decode) to 131072 pairs (the multi-block path), one expert taking everything.
#include <gtest/gtest.h>

#ifdef MG_WITH_CUDA  // the CUDA headers exist only where the toolkit is installed
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "tests/cuda/cuda_test_util.h"
#ifdef MG_WITH_CUDA
#include "ops/moe/cuda/moe_align_cuda.h"
#endif

namespace mg {
namespace {

#ifdef MG_WITH_CUDA

using testing::DeviceBuffer;

template <typename T>
T to_elem(float v) {
  if constexpr (std::is_same_v<T, float>) return v;
  if constexpr (std::is_same_v<T, __half>) return __float2half_rn(v);
  if constexpr (std::is_same_v<T, __nv_bfloat16>) return __float2bfloat16_rn(v);
}
template <typename T>
float from_elem(T v) {
  if constexpr (std::is_same_v<T, float>) return v;
  if constexpr (std::is_same_v<T, __half>) return __half2float(v);
  if constexpr (std::is_same_v<T, __nv_bfloat16>) return __bfloat162float(v);
}

// Random values in [-1, 1] rounded through T, never zero.
template <typename T>
std::vector<float> random_values(size_t n, uint32_t seed) {
  std::vector<float> v = testing::random_floats(n, seed);
  for (float& x : v) {
    x = from_elem(to_elem<T>(x));
    if (x == 0.0f) x = 0.5f;
  }
  return v;
}

template <typename T>
std::vector<T> to_elems(const std::vector<float>& v) {
  std::vector<T> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = to_elem<T>(v[i]);
  return out;
}

struct Case {
  int64_t tokens, k, num_experts, num_local;
  bool one_expert;  // every token's first choice is the same expert
};

// Routed ids: k distinct experts per token; expert_map: the rank holds num_local experts from
// num_experts / 3 on (all when num_local = num_experts).
struct Routing {
  std::vector<int32_t> ids, map;
};
Routing make_routing(const Case& c, uint32_t seed) {
  std::mt19937 rng(seed);
  Routing r;
  r.map.assign(c.num_experts, -1);
  const int64_t first = c.num_local == c.num_experts ? 0 : c.num_experts / 3;
  for (int64_t l = 0; l < c.num_local; ++l) r.map[first + l] = static_cast<int32_t>(l);
  for (int64_t t = 0; t < c.tokens; ++t) {
    std::vector<int32_t> picked;
    if (c.one_expert) picked.push_back(static_cast<int32_t>(first));
    while (static_cast<int64_t>(picked.size()) < c.k) {
      const auto id = static_cast<int32_t>(rng() % c.num_experts);
      if (std::find(picked.begin(), picked.end(), id) == picked.end()) picked.push_back(id);
    }
    r.ids.insert(r.ids.end(), picked.begin(), picked.end());
  }
  return r;
}

const std::vector<Case>& cases() {
  static const std::vector<Case> all = {
      {1, 1, 8, 8, false},         {1, 8, 256, 256, false},    {1, 8, 256, 32, false},
      {3, 2, 4, 4, false},         {7, 4, 60, 20, false},      {64, 8, 256, 64, false},
      {512, 8, 256, 256, false},   {513, 8, 256, 256, true},   {2048, 8, 128, 128, false},
      {16384, 8, 256, 256, false}, {16384, 8, 256, 32, false}, {4096, 32, 1024, 1024, false},
      {20000, 2, 8, 8, true},      {0, 8, 256, 256, false},
  };
  return all;
}

struct Aligned {
  std::vector<int32_t> counts, offsets, pair_to_row, row_to_pair;
};

TEST(MoEAlignCuda, GroupsPairsByLocalExpert) {
  MG_REQUIRE_GPU();
  uint32_t seed = 700;
  for (const Case& c : cases()) {
    SCOPED_TRACE(
        fmt::format("tokens={} k={} E={} E_local={}", c.tokens, c.k, c.num_experts, c.num_local));
    const Routing r = make_routing(c, ++seed);
    const int64_t P = c.tokens * c.k, E_local = c.num_local;
    DeviceBuffer ids(P * 4), map(c.num_experts * 4), counts(E_local * 4),
        offsets((E_local + 1) * 4), p2r(P * 4), r2p(P * 4);
    ids.upload(r.ids.data(), P * 4);
    map.upload(r.map.data(), c.num_experts * 4);
    MG_CUDA_CHECK(cudaMemset(counts.as<void>(), 0x7f, E_local * 4));  // must be overwritten
    MG_CUDA_CHECK(cudaMemset(p2r.as<void>(), 0x7f, P * 4));
    const cuda::MoEAlignment a{counts.as<int32_t>(), offsets.as<int32_t>(), p2r.as<int32_t>(),
                               r2p.as<int32_t>()};
    cuda::launch_moe_align(ids.as<int32_t>(), P, map.as<int32_t>(), c.num_experts, E_local, a,
                           nullptr);
    MG_CUDA_CHECK(cudaDeviceSynchronize());
    Aligned h{std::vector<int32_t>(E_local), std::vector<int32_t>(E_local + 1),
              std::vector<int32_t>(P), std::vector<int32_t>(P)};
    counts.download(h.counts.data(), E_local * 4);
    offsets.download(h.offsets.data(), (E_local + 1) * 4);
    p2r.download(h.pair_to_row.data(), P * 4);
    r2p.download(h.row_to_pair.data(), P * 4);

    std::vector<int32_t> want_counts(E_local, 0);
    int64_t local_pairs = 0;
    for (int64_t p = 0; p < P; ++p) {
      if (r.map[r.ids[p]] >= 0) ++want_counts[r.map[r.ids[p]]], ++local_pairs;
    }
    ASSERT_EQ(h.counts, want_counts);
    ASSERT_EQ(h.offsets[0], 0);
    for (int64_t e = 0; e < E_local; ++e)
      ASSERT_EQ(h.offsets[e + 1] - h.offsets[e], want_counts[e]);
    ASSERT_EQ(h.offsets[E_local], local_pairs);
    std::vector<bool> seen(local_pairs, false);
    for (int64_t p = 0; p < P; ++p) {
      const int32_t local = r.map[r.ids[p]], row = h.pair_to_row[p];
      if (local < 0) {
        ASSERT_EQ(row, -1) << "pair " << p;
        continue;
      }
      ASSERT_GE(row, h.offsets[local]) << "pair " << p;
      ASSERT_LT(row, h.offsets[local + 1]) << "pair " << p;
      ASSERT_FALSE(seen[row]) << "row " << row << " twice";
      seen[row] = true;
      ASSERT_EQ(h.row_to_pair[row], p);
    }
  }
}

// Gather and combine on top of a real alignment, in one dtype.
template <typename T>
void check_gather_and_combine(double tolerance) {
  uint32_t seed = 900;
  for (const Case& c : cases()) {
    for (int64_t H : {int64_t{8}, int64_t{13}, int64_t{256}}) {  // 13: not 16-byte rows
      if (c.tokens * c.k * H > (int64_t{1} << 22) && H != 256) continue;
      SCOPED_TRACE(fmt::format("tokens={} k={} E={} E_local={} H={}", c.tokens, c.k, c.num_experts,
                               c.num_local, H));
      const Routing r = make_routing(c, ++seed);
      const int64_t P = c.tokens * c.k, E_local = c.num_local, M = c.tokens;
      DeviceBuffer ids(P * 4), map(c.num_experts * 4), counts(E_local * 4),
          offsets((E_local + 1) * 4), p2r(P * 4), r2p(P * 4);
      ids.upload(r.ids.data(), P * 4);
      map.upload(r.map.data(), c.num_experts * 4);
      const cuda::MoEAlignment a{counts.as<int32_t>(), offsets.as<int32_t>(), p2r.as<int32_t>(),
                                 r2p.as<int32_t>()};
      cuda::launch_moe_align(ids.as<int32_t>(), P, map.as<int32_t>(), c.num_experts, E_local, a,
                             nullptr);
      std::vector<int32_t> pair_to_row(P);
      MG_CUDA_CHECK(cudaDeviceSynchronize());
      p2r.download(pair_to_row.data(), P * 4);

      const std::vector<float> x = random_values<T>(M * H, ++seed);
      const std::vector<float> y = random_values<T>(P * H, ++seed);
      const std::vector<float> b2 = random_values<T>(E_local * H, ++seed);
      const std::vector<float> w = testing::random_floats(P, ++seed);
      DeviceBuffer dx(M * H * sizeof(T)), dxp(P * H * sizeof(T)), dy(P * H * sizeof(T)),
          db(E_local * H * sizeof(T)), dout(M * H * sizeof(T)), dw(P * 4);
      dx.upload(to_elems<T>(x).data(), M * H * sizeof(T));
      dy.upload(to_elems<T>(y).data(), P * H * sizeof(T));
      db.upload(to_elems<T>(b2).data(), E_local * H * sizeof(T));
      dw.upload(w.data(), P * 4);

      cuda::launch_moe_gather<T>(dx.as<void>(), M, c.k, H, a, dxp.as<void>(), nullptr);
      std::vector<T> xp(P * H);
      MG_CUDA_CHECK(cudaDeviceSynchronize());
      dxp.download(xp.data(), P * H * sizeof(T));
      for (int64_t p = 0; p < P; ++p) {
        if (pair_to_row[p] < 0) continue;
        for (int64_t i = 0; i < H; ++i) {
          ASSERT_EQ(from_elem(xp[pair_to_row[p] * H + i]), x[(p / c.k) * H + i])
              << "pair " << p << " column " << i;
        }
      }

      for (bool with_bias : {false, true}) {
        cuda::launch_moe_combine<T>(dy.as<void>(), a, ids.as<int32_t>(), dw.as<float>(),
                                    map.as<int32_t>(), with_bias ? db.as<void>() : nullptr, M, c.k,
                                    H, dout.as<void>(), nullptr);
        std::vector<T> out(M * H);
        MG_CUDA_CHECK(cudaDeviceSynchronize());
        dout.download(out.data(), M * H * sizeof(T));
        std::vector<float> got(M * H), want(M * H, 0.0f);
        for (int64_t t = 0; t < M; ++t) {
          for (int64_t i = 0; i < H; ++i) {
            double acc = 0.0;
            for (int64_t j = 0; j < c.k; ++j) {
              const int64_t p = t * c.k + j;
              if (pair_to_row[p] < 0) continue;
              const double bias = with_bias ? b2[r.map[r.ids[p]] * H + i] : 0.0;
              acc += w[p] * (y[pair_to_row[p] * H + i] + bias);
            }
            want[t * H + i] = static_cast<float>(acc);
            got[t * H + i] = from_elem(out[t * H + i]);
          }
        }
        EXPECT_LT(testing::normalized_error(got, want), tolerance) << "bias " << with_bias;
      }
    }
  }
}

TEST(MoEAlignCuda, GatherAndCombineMatchTheHost) {
  MG_REQUIRE_GPU();
  check_gather_and_combine<float>(1e-5);
  check_gather_and_combine<__half>(2e-3);
  check_gather_and_combine<__nv_bfloat16>(1e-2);
}

// Llama-4: x_out = w[t, 0] * x[t] rounded once; w_out = 1, written over w itself.
template <typename T>
void check_scale_input() {
  uint32_t seed = 1300;
  for (int64_t M : {1, 5, 300}) {
    for (int64_t H : {int64_t{8}, int64_t{13}, int64_t{1024}}) {
      SCOPED_TRACE(fmt::format("M={} H={}", M, H));
      const int64_t k = 2;
      const std::vector<float> x = random_values<T>(M * H, ++seed);
      const std::vector<float> w = testing::random_floats(M * k, ++seed);
      DeviceBuffer dx(M * H * sizeof(T)), dxo(M * H * sizeof(T)), dw(M * k * 4);
      dx.upload(to_elems<T>(x).data(), M * H * sizeof(T));
      dw.upload(w.data(), M * k * 4);
      cuda::launch_moe_scale_input<T>(dx.as<void>(), dw.as<float>(), M, k, H, dxo.as<void>(),
                                      dw.as<float>(), nullptr);
      std::vector<T> out(M * H);
      std::vector<float> w_out(M * k);
      MG_CUDA_CHECK(cudaDeviceSynchronize());
      dxo.download(out.data(), M * H * sizeof(T));
      dw.download(w_out.data(), M * k * 4);
      for (int64_t t = 0; t < M; ++t) {
        for (int64_t j = 0; j < k; ++j) ASSERT_EQ(w_out[t * k + j], 1.0f);
        for (int64_t i = 0; i < H; ++i) {
          ASSERT_EQ(from_elem(out[t * H + i]), from_elem(to_elem<T>(w[t * k] * x[t * H + i])))
              << "token " << t << " column " << i;
        }
      }
    }
  }
}

TEST(MoEAlignCuda, ScaleInputMatchesTheHost) {
  MG_REQUIRE_GPU();
  check_scale_input<float>();
  check_scale_input<__half>();
  check_scale_input<__nv_bfloat16>();
}

#endif  // MG_WITH_CUDA

}  // namespace
}  // namespace mg
