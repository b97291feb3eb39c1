// The decode expert kernels (ops/moe/cuda/decode_experts_cuda.h) against an fp64 host loop, in
// BF16, F16 and F32, over every activation, with and without biases, with weight_on_input, for
// M = 1, 2, 5 and kDecodeMaxTokens tokens, with some experts not local, on small odd shapes.
// Inputs are random (never zero) and rounded through the dtype first, so the reference sees the
// values the kernels see; the output is poisoned (NaN) and guarded before every run.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "tests/cuda/cuda_test_util.h"
#include "tests/cuda/moe_kernel_test_util.h"
#include "tests/testing/test_util.h"
#ifdef MG_WITH_CUDA
#include <cuda_bf16.h>

#include "framework/device/cuda/dtype_dispatch.h"
#include "ops/moe/cuda/decode_experts_cuda.h"
#include "ops/moe/cuda/moe_routing_cuda.h"
#endif

namespace mg {
namespace {

#ifdef MG_WITH_CUDA

using cuda::MoEActKind;
using testing::cuda_dtypes;
using testing::DeviceBuffer;
using testing::DtypeTolerance;
using testing::reference_activation;
using testing::round_through;

constexpr MoEActKind kAllKinds[] = {MoEActKind::kSiluGated,     MoEActKind::kGeluGated,
                                    MoEActKind::kGeluTanhGated, MoEActKind::kSwigluOai,
                                    MoEActKind::kReluSquared,   MoEActKind::kSilu,
                                    MoEActKind::kGelu};

// One decode-experts problem on the host (F32 values already rounded through the dtype).
struct Problem {
  int64_t tokens = 0, top_k = 0, hidden = 0, inter = 0, local_experts = 0;
  cuda::MoEActParams act;
  bool weight_on_input = false;
  Tensor x;             // [M, H]
  Tensor topk_ids;      // [M, k] I32, global ids
  Tensor topk_weights;  // [M, k]
  Tensor expert_map;    // [E] I32
  Tensor w13, b13;      // [E_local, N1, H], [E_local, N1] or undefined
  Tensor w2, b2;        // [E_local, H, I], [E_local, H] or undefined

  int64_t n1() const { return cuda::is_gated(act.kind) ? 2 * inter : inter; }
};

// out[t, :] = sum_j w'[t, j] * (W2[e] act(W13[e] x'[t] + b13[e]) + b2[e]), all in fp64.
std::vector<float> reference(const Problem& p) {
  const bool gated = cuda::is_gated(p.act.kind);
  const int64_t H = p.hidden, I = p.inter, N1 = p.n1();
  const float* x = p.x.data<float>();
  const float* w13 = p.w13.data<float>();
  const float* w2 = p.w2.data<float>();
  std::vector<float> out(static_cast<size_t>(p.tokens * H));
  for (int64_t t = 0; t < p.tokens; ++t) {
    std::vector<double> sum(static_cast<size_t>(H), 0.0);
    for (int64_t j = 0; j < p.top_k; ++j) {
      const int32_t e = p.expert_map.data<int32_t>()[p.topk_ids.data<int32_t>()[t * p.top_k + j]];
      if (e < 0) continue;
      const double w = p.topk_weights.data<float>()[t * p.top_k + j];
      const double scale = p.weight_on_input ? w : 1.0;
      std::vector<double> a(static_cast<size_t>(I));
      for (int64_t i = 0; i < I; ++i) {
        double g = 0.0, u = 0.0;
        for (int64_t h = 0; h < H; ++h) {
          const double xs = scale * x[t * H + h];
          g += static_cast<double>(w13[(e * N1 + i) * H + h]) * xs;
          if (gated) u += static_cast<double>(w13[(e * N1 + I + i) * H + h]) * xs;
        }
        if (p.b13.defined()) {
          g += p.b13.data<float>()[e * N1 + i];
          if (gated) u += p.b13.data<float>()[e * N1 + I + i];
        }
        a[i] = reference_activation(p.act, g, u);
      }
      for (int64_t h = 0; h < H; ++h) {
        double y = 0.0;
        for (int64_t i = 0; i < I; ++i) y += static_cast<double>(w2[(e * H + h) * I + i]) * a[i];
        if (p.b2.defined()) y += p.b2.data<float>()[e * H + h];
        sum[h] += (p.weight_on_input ? 1.0 : w) * y;
      }
    }
    for (int64_t h = 0; h < H; ++h) out[t * H + h] = static_cast<float>(sum[h]);
  }
  return out;
}

Tensor i32_from(Shape shape, const std::vector<int32_t>& values) {
  Tensor t = Tensor::empty_cpu(DType::kI32, std::move(shape));
  std::copy(values.begin(), values.end(), t.data<int32_t>());
  return t;
}

// Runs the kernels on `p` in `dtype` (with `tiles` forced, else the defaults) and returns out
// [M, H] as F32. The output sits between guard bytes and starts as NaN; act_scratch starts as NaN
// too.
// With `identity`, a map that is the identity is passed as such (identity_experts: the kernels do
// not read it), as the backend does without expert parallelism.
Tensor run_device(const Problem& p, DType dtype, const cuda::DecodeExpertsTiles* tiles = nullptr,
                  bool identity = true) {
  auto stream = make_stream(Device::cuda(0));
  Stream* s = stream.get();
  const Tensor x = testing::upload(p.x, dtype, s);
  const Tensor ids = testing::upload(p.topk_ids, DType::kI32, s);
  const Tensor weights = testing::upload(p.topk_weights, DType::kF32, s);
  const Tensor map = testing::upload(p.expert_map, DType::kI32, s);
  const Tensor w13 = testing::upload(p.w13, dtype, s);
  const Tensor b13 = testing::upload(p.b13, dtype, s);
  const Tensor w2 = testing::upload(p.w2, dtype, s);
  const Tensor b2 = testing::upload(p.b2, dtype, s);
  const Tensor act = empty_tensor(Device::cuda(0), dtype, {p.tokens * p.top_k, p.inter}, s);
  MG_CUDA_CHECK(cudaMemsetAsync(act.raw(), 0xff, act.nbytes(), cuda::native(s)));

  constexpr size_t kGuard = testing::DeviceOp::kGuard;
  const size_t bytes = static_cast<size_t>(p.tokens * p.hidden) * dtype_size(dtype);
  auto buffer = allocator_for(Device::cuda(0)).allocate(bytes + 2 * kGuard, s);
  MG_CUDA_CHECK(cudaMemsetAsync(buffer->data(), 0xff, bytes + 2 * kGuard, cuda::native(s)));
  const Tensor out(buffer, dtype, {p.tokens, p.hidden}, kGuard);

  cuda::DecodeExpertsArgs args;
  args.x = x.raw();
  args.topk_ids = ids.data<int32_t>();
  args.topk_weights = weights.data<float>();
  args.expert_map = map.data<int32_t>();
  const int64_t experts = p.expert_map.numel();
  bool is_identity = true;
  for (int64_t e = 0; e < experts; ++e) is_identity &= p.expert_map.data<int32_t>()[e] == e;
  args.identity_experts = identity && is_identity ? static_cast<int>(experts) : 0;
  args.w13 = w13.raw();
  args.b13 = b13.defined() ? b13.raw() : nullptr;
  args.w2 = w2.raw();
  args.b2 = b2.defined() ? b2.raw() : nullptr;
  args.act_scratch = act.raw();
  args.out = out.raw();
  args.num_tokens = p.tokens;
  args.top_k = p.top_k;
  args.hidden = p.hidden;
  args.inter = p.inter;
  args.act = p.act;
  args.weight_on_input = p.weight_on_input;
  cuda::dispatch_float_dtype(dtype, [&](auto zero) {
    if (tiles != nullptr) {
      cuda::launch_decode_experts_tiled<decltype(zero)>(args, *tiles, cuda::native(s));
    } else {
      cuda::launch_decode_experts<decltype(zero)>(args, cuda::native(s));
    }
  });
  MG_CUDA_CHECK(cudaStreamSynchronize(cuda::native(s)));

  std::vector<unsigned char> before(kGuard), after(kGuard);
  const char* base = static_cast<const char*>(buffer->data());
  MG_CUDA_CHECK(cudaMemcpy(before.data(), base, kGuard, cudaMemcpyDeviceToHost));
  MG_CUDA_CHECK(cudaMemcpy(after.data(), base + kGuard + bytes, kGuard, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < kGuard; ++i) {
    EXPECT_EQ(before[i], 0xff) << "guard byte " << i << " before the output";
    EXPECT_EQ(after[i], 0xff) << "guard byte " << i << " after the output";
  }
  return testing::download_f32(out, s);
}

// A random problem: `experts` global experts of which about a third are not local (with
// `all_local`, every expert is local under its own id: the identity map), each token's k ids
// distinct, routing weights in [0.1, 1).
Problem random_problem(int64_t tokens, int64_t top_k, int64_t hidden, int64_t inter,
                       int64_t experts, MoEActKind kind, bool bias, bool weight_on_input,
                       DType dtype, uint32_t seed, bool all_local = false) {
  Problem p;
  p.tokens = tokens;
  p.top_k = top_k;
  p.hidden = hidden;
  p.inter = inter;
  p.act.kind = kind;
  p.act.swiglu_limit = 0.9f;  // inside the range of these small values, so both clamps matter
  p.weight_on_input = weight_on_input;
  std::mt19937 rng(seed);
  std::vector<int32_t> map(static_cast<size_t>(experts), -1);
  std::vector<int32_t> order(static_cast<size_t>(experts));
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  for (int64_t e = 0; e < experts; ++e) {
    if (all_local) {
      map[e] = static_cast<int32_t>(p.local_experts++);
    } else if (e % 3 != 2) {
      map[order[e]] = static_cast<int32_t>(p.local_experts++);
    }
  }
  p.expert_map = i32_from({experts}, map);
  std::vector<int32_t> ids;
  for (int64_t t = 0; t < tokens; ++t) {
    std::shuffle(order.begin(), order.end(), rng);
    ids.insert(ids.end(), order.begin(), order.begin() + top_k);
  }
  p.topk_ids = i32_from({tokens, top_k}, ids);
  p.topk_weights = testing::random_tensor({tokens, top_k}, seed + 1, 0.1f, 1.0f);
  const int64_t n1 = p.n1();
  const float s1 = 1.0f / std::sqrt(static_cast<float>(hidden));
  const float s2 = 1.0f / std::sqrt(static_cast<float>(inter));
  p.x = round_through(testing::random_tensor({tokens, hidden}, seed + 2), dtype);
  p.w13 = round_through(
      testing::random_tensor({p.local_experts, n1, hidden}, seed + 3, -2 * s1, 2 * s1), dtype);
  p.w2 = round_through(
      testing::random_tensor({p.local_experts, hidden, inter}, seed + 4, -2 * s2, 2 * s2), dtype);
  if (bias) {
    p.b13 =
        round_through(testing::random_tensor({p.local_experts, n1}, seed + 5, -0.5f, 0.5f), dtype);
    p.b2 = round_through(testing::random_tensor({p.local_experts, hidden}, seed + 6, -0.5f, 0.5f),
                         dtype);
  }
  return p;
}

TEST(DecodeExpertsCuda, MatchesReference) {
  MG_REQUIRE_GPU();
  struct Shape {
    int64_t hidden, inter, experts, top_k;
  };
  // Odd sizes: one 16-byte vector per row, tails of a warp's 32 vectors, 2880 = 8 * 360 rows
  // (the GPT-OSS hidden size, not a multiple of 64), top_k 1 for weight_on_input, and an inter
  // large enough (8 pairs * 8200 * 2 bytes > 128 KB) for the four-row down variant.
  const Shape shapes[] = {{8, 8, 4, 2},     {24, 200, 6, 3},  {200, 24, 9, 4},
                          {2880, 24, 5, 2}, {40, 2880, 3, 1}, {16, 8200, 3, 2}};
  const int64_t token_counts[] = {1, 2, 5, cuda::kDecodeMaxTokens};
  uint32_t seed = 7000;
  for (const DtypeTolerance& d : cuda_dtypes()) {
    for (const Shape& s : shapes) {
      for (const MoEActKind kind : kAllKinds) {
        for (const bool bias : {false, true}) {
          for (const bool woi : {false, true}) {
            if (woi && s.top_k != 1) continue;
            for (const int64_t tokens : token_counts) {
              SCOPED_TRACE(
                  fmt::format("{} (tolerance {}) H={} I={} E={} k={} M={} act={} bias={} "
                              "weight_on_input={}",
                              dtype_name(d.dtype), d.tolerance, s.hidden, s.inter, s.experts,
                              s.top_k, tokens, static_cast<int>(kind), bias, woi));
              const Problem p = random_problem(tokens, s.top_k, s.hidden, s.inter, s.experts, kind,
                                               bias, woi, d.dtype, ++seed);
              const Tensor out = run_device(p, d.dtype);
              EXPECT_LT(testing::normalized_error(testing::span_of(out), reference(p)),
                        d.tolerance);
            }
          }
        }
      }
    }
  }
}

// Without expert parallelism the map is the identity and the kernels take a pair's id as its local
// expert without reading the map (LocalExperts): the same bits as the path that reads it, and the
// reference, for one window of pairs (M = 1, 3) and the general grouping walk (M = 8: 64 pairs).
TEST(DecodeExpertsCuda, IdentityMapIsNotReadAndGivesTheSameBits) {
  MG_REQUIRE_GPU();
  uint32_t seed = 9600;
  for (const DtypeTolerance& d : cuda_dtypes()) {
    for (const int64_t tokens : {1, 3, 8}) {
      SCOPED_TRACE(fmt::format("{} M={}", dtype_name(d.dtype), tokens));
      const Problem p = random_problem(tokens, 8, 328, 136, 24, MoEActKind::kSiluGated, true, false,
                                       d.dtype, ++seed, /*all_local=*/true);
      const Tensor skipped = run_device(p, d.dtype);
      const Tensor read = run_device(p, d.dtype, nullptr, /*identity=*/false);
      EXPECT_LT(testing::normalized_error(testing::span_of(skipped), reference(p)), d.tolerance);
      for (int64_t i = 0; i < skipped.numel(); ++i) {
        ASSERT_EQ(skipped.data<float>()[i], read.data<float>()[i]) << "element " << i;
      }
    }
  }
}

// Every forced variant of the two kernels (decode_experts_cuda.h's DecodeExpertsTiles) computes
// the reference: both up vector counts, the three down warp shapes, tiles that leave CTAs without
// units or rows, one expert slot (a CTA walks every expert), the L2 prefetches on, policy and
// PDL switched off; at M = 1, 3 and 8 on sizes that are multiples of 8 but not of 64, with most
// experts receiving no token and the last token routed only to experts of other ranks.
TEST(DecodeExpertsCuda, ForcedVariantsMatchReference) {
  MG_REQUIRE_GPU();
  using Tiles = cuda::DecodeExpertsTiles;
  std::vector<std::pair<std::string, Tiles>> variants;
  variants.push_back({"default", Tiles{}});
  Tiles t;
  t.up_vectors = 8;
  variants.push_back({"up 8 vectors", t});
  t = Tiles{};
  t.down_rows_per_warp = 4;
  t.down_vectors = 4;
  variants.push_back({"down 4x4", t});
  t = Tiles{};
  t.down_rows_per_warp = 2;
  t.down_vectors = 4;
  t.up_units_per_cta = 8;
  t.down_rows_per_cta = 4;
  variants.push_back({"down 2x4, 8 units, 4 rows per CTA", t});
  t = Tiles{};
  t.up_vectors = 8;
  t.down_rows_per_warp = 4;
  t.down_vectors = 4;
  t.up_expert_slots = 1;
  t.up_units_per_cta = 512;
  t.down_rows_per_cta = 64;  // 128 pairs x 64 rows of fp32 partials: 32 KB of shared memory
  variants.push_back({"one expert slot, few CTAs", t});
  t = Tiles{};
  t.down_prefetch = false;
  t.up_prefetch = false;
  t.evict_first = false;
  t.pdl = false;
  variants.push_back({"no prefetch, no policy, no PDL", t});
  t = Tiles{};
  t.down_prefetch = true;
  t.up_prefetch = true;
  variants.push_back({"up and down prefetch", t});
  t = Tiles{};
  t.up_pairs_per_pass = 1;
  variants.push_back({"up 1 pair a pass", t});
  t.up_pairs_per_pass = 2;
  variants.push_back({"up 2 pairs a pass", t});
  t.up_pairs_per_pass = 8;
  variants.push_back({"up 8 pairs a pass", t});

  struct Shape {
    int64_t hidden, inter, experts, top_k;
  };
  // 328 = 8 * 41 and 136 = 8 * 17: tails in every vector pass; 2056 = 8 * 257 > one pass of 8
  // vectors * 32 lanes; 24 experts at top_k 8 leave most without a token at M = 1.
  const Shape shapes[] = {{328, 136, 16, 4}, {72, 2056, 6, 2}, {2056, 72, 24, 8}};
  uint32_t seed = 9100;
  for (const DtypeTolerance& d : cuda_dtypes()) {
    for (const Shape& s : shapes) {
      for (const int64_t tokens : {1, 3, 8}) {
        Problem p = random_problem(tokens, s.top_k, s.hidden, s.inter, s.experts,
                                   MoEActKind::kSiluGated, true, false, d.dtype, ++seed);
        if (tokens > 1) {  // the last token's pairs all on other ranks: its output is zeros
          std::vector<int32_t> remote;
          for (int64_t e = 0; e < s.experts; ++e) {
            if (p.expert_map.data<int32_t>()[e] < 0) remote.push_back(static_cast<int32_t>(e));
          }
          ASSERT_GE(static_cast<int64_t>(remote.size()), s.top_k);
          for (int64_t j = 0; j < s.top_k; ++j) {
            p.topk_ids.data<int32_t>()[(tokens - 1) * s.top_k + j] = remote[j];
          }
        }
        const std::vector<float> want = reference(p);
        for (const auto& [name, tiles] : variants) {
          SCOPED_TRACE(fmt::format("{} H={} I={} E={} k={} M={} variant {}", dtype_name(d.dtype),
                                   s.hidden, s.inter, s.experts, s.top_k, tokens, name));
          const Tensor out = run_device(p, d.dtype, &tiles);
          EXPECT_LT(testing::normalized_error(testing::span_of(out), want), d.tolerance);
          if (tokens > 1) {
            for (int64_t h = 0; h < s.hidden; ++h) {
              ASSERT_EQ(out.data<float>()[(tokens - 1) * s.hidden + h], 0.0f) << "h " << h;
            }
          }
        }
      }
    }
  }
  // 16 tokens of 1536 BF16 (48 KB) do not fit the up kernel's shared memory at once, a group of 8
  // (24 KB) does: x is staged per pair group.
  {
    const Problem p = random_problem(16, 8, 1536, 72, 24, MoEActKind::kSiluGated, false, false,
                                     DType::kBF16, 9200);
    const std::vector<float> want = reference(p);
    for (const auto& [name, tiles] : variants) {
      SCOPED_TRACE(fmt::format("x staged per group, variant {}", name));
      const Tensor out = run_device(p, DType::kBF16, &tiles);
      EXPECT_LT(testing::normalized_error(testing::span_of(out), want), 1e-2);
    }
  }
  // Plain activations take the two-units-per-item up kernels.
  for (const auto& [name, tiles] : variants) {
    SCOPED_TRACE(fmt::format("plain gelu, variant {}", name));
    const Problem p =
        random_problem(3, 2, 136, 328, 9, MoEActKind::kGelu, true, false, DType::kBF16, 9300);
    const Tensor out = run_device(p, DType::kBF16, &tiles);
    EXPECT_LT(testing::normalized_error(testing::span_of(out), reference(p)), 1e-2);
  }
}

TEST(DecodeExpertsCuda, RunsMorePairsThanOneLaunchHoldsInChunks) {
  MG_REQUIRE_GPU();
  // 40 tokens * k 8 = 320 pairs > 256: two launch pairs of 32 and 8 tokens.
  for (const DtypeTolerance& d : cuda_dtypes()) {
    SCOPED_TRACE(dtype_name(d.dtype));
    const Problem p =
        random_problem(40, 8, 64, 48, 24, MoEActKind::kSwigluOai, true, false, d.dtype, 8100);
    const Tensor out = run_device(p, d.dtype);
    EXPECT_LT(testing::normalized_error(testing::span_of(out), reference(p)), d.tolerance);
  }
}

// By hand: H = I = 8, plain ReLU², W13[e] = (e + 1) * identity, W2[e] = identity, so an expert's
// output is ((e + 1) x)². Global experts 0..3 map to local {0, -, 1, -}.
//   token 0: experts {0, 2}, weights {0.25, 0.75} -> 0.25 x² + 0.75 (2x)² = 3.25 x²
//   token 1: experts {1, 0}, weights {0.5, 0.5}   -> expert 1 is remote: 0.5 x²
//   token 2: experts {3, 1}                       -> no local expert: zeros
TEST(DecodeExpertsCuda, HandCheckedTokens) {
  MG_REQUIRE_GPU();
  Problem p;
  p.tokens = 3;
  p.top_k = 2;
  p.hidden = 8;
  p.inter = 8;
  p.local_experts = 2;
  p.act.kind = MoEActKind::kReluSquared;
  std::vector<float> x(24), w13(2 * 64, 0.0f), w2(2 * 64, 0.0f);
  for (int h = 0; h < 8; ++h) {
    for (int t = 0; t < 3; ++t) x[t * 8 + h] = static_cast<float>(h + 1) / 8.0f;
    for (int e = 0; e < 2; ++e) {
      w13[e * 64 + h * 8 + h] = static_cast<float>(e + 1);
      w2[e * 64 + h * 8 + h] = 1.0f;
    }
  }
  p.x = testing::tensor_from({3, 8}, x);
  p.w13 = testing::tensor_from({2, 8, 8}, w13);
  p.w2 = testing::tensor_from({2, 8, 8}, w2);
  p.topk_ids = i32_from({3, 2}, {0, 2, 1, 0, 3, 1});
  const std::vector<float> weights = {0.25f, 0.75f, 0.5f, 0.5f, 1.0f, 1.0f};
  p.topk_weights = testing::tensor_from({3, 2}, weights);
  p.expert_map = i32_from({4}, {0, -1, 1, -1});
  for (const DtypeTolerance& d : cuda_dtypes()) {
    SCOPED_TRACE(dtype_name(d.dtype));
    const Tensor out = run_device(p, d.dtype);
    const float* y = out.data<float>();
    for (int h = 0; h < 8; ++h) {
      const float xh = static_cast<float>(h + 1) / 8.0f;
      EXPECT_NEAR(y[h], 3.25f * xh * xh, 1e-2f * 3.25f) << "token 0, h " << h;
      EXPECT_NEAR(y[8 + h], 0.5f * xh * xh, 1e-2f * 0.5f) << "token 1, h " << h;
      EXPECT_EQ(y[16 + h], 0.0f) << "token 2, h " << h;
    }
  }
}

// The Qwen3-30B-A3B layer's experts (BF16, H 2048, E 128, top-8, I 768, SiLU-gated; softmax
// routing renormalised) at M = 1, 2, 4, 8, timed per variant, printed (µs a launch, graph-replayed
// over 48 launches whose routes differ, so the weights come from HBM: 128 experts are 1.2 GB) with
// the weight bandwidth: what `moegraph bench moe --shape qwen3-30b-a3b --kernel decode` times as
// one number, taken apart (routing alone, up alone, down alone) and swept over the tiles. The
// floor at M = 1: 8 experts x 3 x 2048 x 768 x 2 B = 75.5 MB over the copy bandwidth (~3.0 TB/s
// on an H100: ~25 µs).
TEST(DecodeExpertsCuda, TimesTilesOnTheQwen3Shape) {
  MG_REQUIRE_GPU();
  constexpr int64_t E = 128, H = 2048, I = 768, k = 8;
  constexpr int kLaunches = 48, kReplays = 10;
  using Tiles = cuda::DecodeExpertsTiles;
  cudaStream_t stream = nullptr;
  MG_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  // Weight values do not change the time: a constant small BF16 (0x3c3c ~ 0.0115) everywhere.
  DeviceBuffer w13(static_cast<size_t>(E * 2 * I * H * 2)), w2(static_cast<size_t>(E * H * I * 2));
  MG_CUDA_CHECK(cudaMemset(w13.as<void>(), 0x3c, static_cast<size_t>(E * 2 * I * H * 2)));
  MG_CUDA_CHECK(cudaMemset(w2.as<void>(), 0x3c, static_cast<size_t>(E * H * I * 2)));
  std::vector<int32_t> identity(E);
  std::iota(identity.begin(), identity.end(), 0);
  DeviceBuffer map(E * sizeof(int32_t));
  map.upload(identity.data(), E * sizeof(int32_t));
  constexpr int64_t kMaxTokens = 8;
  DeviceBuffer x(kMaxTokens * H * 2), act(kMaxTokens * k * I * 2), out(kMaxTokens * H * 2);
  MG_CUDA_CHECK(cudaMemset(x.as<void>(), 0x3c, kMaxTokens * H * 2));
  DeviceBuffer logits(static_cast<size_t>(kLaunches * kMaxTokens * E) * sizeof(float));
  DeviceBuffer ids(static_cast<size_t>(kLaunches * kMaxTokens * k) * sizeof(int32_t));
  DeviceBuffer weights(static_cast<size_t>(kLaunches * kMaxTokens * k) * sizeof(float));
  {
    const Tensor l = testing::random_tensor({kLaunches * kMaxTokens, E}, 4242, -3.0f, 3.0f);
    logits.upload(l.data<float>(), l.nbytes());
  }
  cuda::RouteParams route;
  route.num_experts = E;
  route.top_k = k;
  route.renormalize = true;

  // `what` per launch i in [0, kLaunches): M tokens of set i.
  const auto time_graph = [&](const auto& what) {
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    MG_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < kLaunches; ++i) what(i);
    MG_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
    MG_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    const double ms = testing::median_graph_replay_ms(exec, stream, kReplays);
    MG_CUDA_CHECK(cudaGraphExecDestroy(exec));
    MG_CUDA_CHECK(cudaGraphDestroy(graph));
    return 1000.0 * ms / kLaunches;
  };

  std::vector<std::pair<std::string, Tiles>> variants;
  Tiles before;  // the kernels as they were before the L2 prefetches and policy
  before.down_prefetch = false;
  before.up_prefetch = false;
  before.evict_first = false;
  variants.push_back({"before (no prefetch, no policy)", before});
  variants.push_back({"default", Tiles{}});
  Tiles t;
  // Right after the default, before the clocks drift (below).
  for (const int pairs : {1, 2, 8}) {
    t = Tiles{};
    t.up_pairs_per_pass = pairs;
    variants.push_back({fmt::format("up {} pairs a pass", pairs), t});
  }
  t = Tiles{};
  t.down_prefetch = true;
  variants.push_back({"with down prefetch", t});
  t = Tiles{};
  t.up_prefetch = true;
  variants.push_back({"with up prefetch", t});
  t = Tiles{};
  t.evict_first = false;
  variants.push_back({"no evict-first", t});
  t = Tiles{};
  t.pdl = false;
  variants.push_back({"no PDL", t});
  t = Tiles{};
  t.up_vectors = 8;
  variants.push_back({"up 8 vectors", t});
  for (const int slots : {8, 32}) {
    t = Tiles{};
    t.up_expert_slots = slots;
    variants.push_back({fmt::format("up {} expert slots", slots), t});
    t.up_units_per_cta = slots == 8 ? 12 : 48;  // the rule's tiles for these slots at M > 1
    variants.push_back({fmt::format("up {} expert slots, {} units", slots, t.up_units_per_cta), t});
  }
  for (const int units : {8, 16, 20, 24, 32, 64}) {
    t = Tiles{};
    t.up_units_per_cta = units;
    variants.push_back({fmt::format("up {} units", units), t});
    t.up_vectors = 8;
    variants.push_back({fmt::format("up {} units, 8 vectors", units), t});
  }
  t = Tiles{};
  t.down_rows_per_warp = 4;
  t.down_vectors = 4;
  variants.push_back({"down 4x4", t});
  t = Tiles{};
  t.down_rows_per_warp = 2;
  t.down_vectors = 4;
  variants.push_back({"down 2x4", t});
  for (const int rows : {4, 16}) {
    t = Tiles{};
    t.down_rows_per_cta = rows;
    variants.push_back({fmt::format("down {} rows per CTA", rows), t});
  }
  // The clocks drift over the sweep (later variants ran faster); the default again shows how much.
  variants.push_back({"default (again, last)", Tiles{}});

  for (const int64_t M : {int64_t{1}, int64_t{2}, int64_t{4}, int64_t{8}}) {
    const auto route_set = [&](int i) {
      cuda::launch_moe_route<float>(route, logits.as<float>() + i * kMaxTokens * E, M, nullptr,
                                    ids.as<int32_t>() + i * kMaxTokens * k,
                                    weights.as<float>() + i * kMaxTokens * k, stream);
    };
    for (int i = 0; i < kLaunches; ++i) route_set(i);
    MG_CUDA_CHECK(cudaStreamSynchronize(stream));
    // The weight bytes a launch reads: its distinct experts.
    std::vector<int32_t> host_ids(static_cast<size_t>(kLaunches * kMaxTokens * k));
    ids.download(host_ids.data(), host_ids.size() * sizeof(int32_t));
    double experts = 0.0;
    for (int i = 0; i < kLaunches; ++i) {
      const auto* first = host_ids.data() + i * kMaxTokens * k;
      experts += static_cast<double>(std::set<int32_t>(first, first + M * k).size());
    }
    const double mb = experts / kLaunches * 3.0 * H * I * 2.0 / 1e6;

    const auto experts_launch = [&](int i, const Tiles& tiles) {
      cuda::DecodeExpertsArgs a;
      a.x = x.as<void>();
      a.topk_ids = ids.as<int32_t>() + i * kMaxTokens * k;
      a.topk_weights = weights.as<float>() + i * kMaxTokens * k;
      a.expert_map = map.as<int32_t>();
      a.w13 = w13.as<void>();
      a.w2 = w2.as<void>();
      a.act_scratch = act.as<void>();
      a.out = out.as<void>();
      a.num_tokens = M;
      a.top_k = k;
      a.hidden = H;
      a.inter = I;
      cuda::launch_decode_experts_tiled<__nv_bfloat16>(a, tiles, stream);
    };
    const auto print = [&](const std::string& name, double us, double bytes_mb) {
      std::cout << fmt::format("[ TIMING ] qwen3 decode experts M={} {}: {:.1f} us", M, name, us);
      if (bytes_mb > 0) std::cout << fmt::format(" ({:.0f} GB/s)", bytes_mb * 1e-3 / (us * 1e-6));
      std::cout << std::endl;
    };
    // One uncaptured call first: the launcher reads the device's attributes once, and an error
    // shows here rather than inside a capture.
    experts_launch(0, Tiles{});
    MG_CUDA_CHECK(cudaStreamSynchronize(stream));
    print(fmt::format("weights {:.1f} MB, routing alone", mb), time_graph(route_set), 0);
    for (const auto& [name, tiles] : variants) {
      const double us = time_graph([&](int i) { experts_launch(i, tiles); });
      print(name, us, mb);
      EXPECT_GT(us, 0.0);
    }
    for (const auto& [name, part] : {std::pair{"up alone", Tiles::Parts::kUpOnly},
                                     std::pair{"down alone", Tiles::Parts::kDownOnly}}) {
      Tiles alone;
      alone.parts = part;
      const double part_mb = part == Tiles::Parts::kUpOnly ? mb * 2.0 / 3.0 : mb / 3.0;
      print(name, time_graph([&](int i) { experts_launch(i, alone); }), part_mb);
    }
    print("routing + default", time_graph([&](int i) {
            route_set(i);
            experts_launch(i, Tiles{});
          }),
          mb);
    print("routing + before", time_graph([&](int i) {
            route_set(i);
            experts_launch(i, before);
          }),
          mb);
  }
  MG_CUDA_CHECK(cudaStreamDestroy(stream));
}

TEST(DecodeExpertsCuda, RefusesUpPairsPerPassOtherThanOneTwoFourEight) {
  MG_REQUIRE_GPU();
  const Problem p =
      random_problem(2, 2, 16, 8, 4, MoEActKind::kSiluGated, false, false, DType::kBF16, 77);
  cuda::DecodeExpertsTiles tiles;
  tiles.up_pairs_per_pass = 3;
  try {
    run_device(p, DType::kBF16, &tiles);
    ADD_FAILURE() << "up_pairs_per_pass 3 was taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("up_pairs_per_pass must be 1, 2, 4 or 8, got 3"),
              std::string::npos)
        << e.what();
  }
}

TEST(DecodeExpertsCuda, CheckNamesTheSizesItRefuses) {
  EXPECT_EQ(cuda::decode_experts_check(2880, 2880), "");
  EXPECT_NE(cuda::decode_experts_check(2880, 100).find("multiples of 8"), std::string::npos);
  EXPECT_NE(cuda::decode_experts_check(0, 8), "");
}

#endif  // MG_WITH_CUDA

}  // namespace
}  // namespace mg
