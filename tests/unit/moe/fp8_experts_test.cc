// FP8 experts on the CPU (oracle module ops/moe/oracle/fp8.h, backend cpu_fp8) against the fp64
// FP8 reference (reference::experts_fp8), for block, per-channel, per-tensor and per-projection
// scales, shapes that are not multiples of the 128 block, experts that receive no tokens, W8A16
// and W8A8, and tensor/expert-parallel shards.
#include <cstring>

#include <gtest/gtest.h>

#include "framework/core/fp8.h"
#include "ops/moe/experts/cpu_fp8_experts.h"
#include "ops/moe/kernel/prepare_finalize.h"
#include "ops/moe/oracle/fp8.h"
#include "ops/moe/reference/moe_reference.h"
#include "tests/unit/moe/moe_test_util.h"

namespace mg {
namespace {

// Codes uniform over the E4M3 range and positive scales around 1 / (448 sqrt(C)), so that the
// real values are like moe_test::random_weights' (O(1) activations whatever the sizes).
std::pair<Tensor, WeightQuantization> random_fp8(const Shape& shape, GroupShape group,
                                                 uint32_t seed) {
  const Tensor v = testing::random_tensor(shape, seed, -kFp8E4M3Max, kFp8E4M3Max);
  Tensor codes = Tensor::empty_cpu(DType::kF8E4M3, shape);
  for (int64_t i = 0; i < v.numel(); ++i) {
    fp8_codes(codes)[i] = float_to_fp8_e4m3(v.data<float>()[i]);
  }
  WeightQuantization q;
  q.group = group;
  const float base = 2.0f / (kFp8E4M3Max * std::sqrt(static_cast<float>(shape.back())));
  q.scale = testing::random_tensor(scale_shape_for(shape, group), seed + 1, 0.5f * base, base);
  return {codes, q};
}

struct Fp8Case {
  const char* name;
  QuantScheme scheme;
  int64_t E, k, H, I;
  MoEActivation act;
  GroupShape g13, g2;
  bool biases = false;
};

MoEConfig fp8_config(const Fp8Case& c) {
  MoEConfig::Fields f = moe_test::experts_config(c.E, c.k, c.H, c.I, c.act, c.biases).fields();
  f.quant_scheme = c.scheme;
  return MoEConfig(f);
}

RawExpertWeights random_raw(const MoEConfig& config, const Fp8Case& c, uint32_t seed,
                            ActivationQuant activation, int64_t activation_group) {
  RawExpertWeights raw;
  std::tie(raw.w13, raw.w13_quant) = random_fp8({c.E, config.w13_rows(), c.H}, c.g13, seed);
  std::tie(raw.w2, raw.w2_quant) = random_fp8({c.E, c.H, c.I}, c.g2, seed + 2);
  for (WeightQuantization* q : {&raw.w13_quant, &raw.w2_quant}) {
    q->activation = activation;
    q->activation_group = activation_group;
  }
  if (c.biases) {
    raw.w13_bias = testing::random_tensor({c.E, config.w13_rows()}, seed + 4, -0.5f, 0.5f);
    raw.w2_bias = testing::random_tensor({c.E, c.H}, seed + 5, -0.5f, 0.5f);
  }
  return raw;
}

const Fp8Case kCases[] = {
    // DeepSeek-V3's 128 x 128 blocks over sizes that are not multiples of 128 (partial blocks,
    // and a block that straddles the gate and up rows of w13).
    {"block128",
     QuantScheme::kFp8Block,
     7,
     2,
     200,
     136,
     MoEActivation::kSiluGated,
     {128, 128},
     {128, 128}},
    // Small blocks, so that many scales take part at small sizes; biases.
    {"block16x32",
     QuantScheme::kFp8Block,
     5,
     3,
     72,
     40,
     MoEActivation::kGeluGated,
     {16, 32},
     {16, 32},
     true},
    {"per_channel", QuantScheme::kFp8PerChannel, 5, 2, 64, 48, MoEActivation::kSwigluOai,
     GroupShape::per_channel(), GroupShape::per_channel()},
    {"per_tensor", QuantScheme::kFp8PerTensor, 4, 1, 40, 24, MoEActivation::kReluSquared,
     GroupShape::per_tensor(), GroupShape::per_tensor()},
    // Per-tensor checkpoints keep one scale per projection for w13 (gate, up).
    {"per_projection",
     QuantScheme::kFp8PerTensor,
     6,
     2,
     33,
     20,
     MoEActivation::kSiluGated,
     {20, -1},
     GroupShape::per_tensor()},
};

// W8A16 differs from fp64 by fp32 sums only (measured <= 5.5e-7 over these cases). W8A8 quantizes
// the same fp32 inputs, so its codes agree unless an activation's fp32 and fp64 values straddle an
// E4M3 rounding boundary, which would move one element by a code step (1/16 to 1/8 of it): none
// does with these seeds (measured <= 1.6e-6); 1e-4 keeps room for summation order, not for flips,
// so a broken quantizer (a wrong scale or rounding mode) fails.
constexpr double kW8A16Tolerance = 1e-5;
constexpr double kW8A8Tolerance = 1e-4;

TEST(Fp8Experts, MatchTheReferenceForEveryScaleLayout) {
  ThreadPool pool(3);
  uint32_t seed = 100;
  for (const Fp8Case& c : kCases) {
    for (const bool w8a8 : {false, true}) {
      SCOPED_TRACE(fmt::format("{} {}", c.name, w8a8 ? "W8A8" : "W8A16"));
      const MoEConfig config = fp8_config(c);
      const int64_t act_group = c.scheme == QuantScheme::kFp8Block ? 128 : -1;
      const RawExpertWeights raw =
          random_raw(config, c, seed += 10,
                     w8a8 ? ActivationQuant::kDynamic : ActivationQuant::kNone, act_group);
      MoEKernelBuild build =
          build_moe_kernel(config, ParallelConfig(), Device::cpu(), DType::kF32, "", raw, Tensor());
      EXPECT_EQ(build.choice.backend->name(), "cpu_fp8");
      for (const int64_t M : {1, 7, 33}) {
        for (const auto pattern : {moe_test::IdPattern::kRandom, moe_test::IdPattern::kAllToOne}) {
          const std::vector<float> x = testing::random_floats(M * c.H, ++seed, -2.0f, 2.0f);
          std::vector<int32_t> ids;
          std::vector<float> w;
          moe_test::random_routing(M, c.E, c.k, pattern, ++seed, ids, w);
          const std::vector<float> want = reference::experts_fp8(
              config, x, M, ids, w, raw.w13, raw.w13_quant, raw.w2, raw.w2_quant, raw.w13_bias,
              raw.w2_bias, w8a8 ? std::optional<int64_t>(act_group) : std::nullopt);
          const std::vector<float> got =
              moe_test::run_kernel(*build.kernel, c.H, x, M, ids, w, {}, &pool);
          EXPECT_LE(testing::normalized_error(got, want), w8a8 ? kW8A8Tolerance : kW8A16Tolerance)
              << "M=" << M;
        }
      }
    }
  }
}

TEST(Fp8Experts, ActivationQuantizationCanBeTurnedOff) {
  // quantize_activations = false (W8A16) on a W8A8 checkpoint: the activation key is the compute
  // dtype and the result is the W8A16 reference's.
  const Fp8Case& c = kCases[0];
  const MoEConfig config = fp8_config(c);
  const RawExpertWeights raw = random_raw(config, c, 7, ActivationQuant::kDynamic, 128);
  MoEKernelBuild on = build_moe_kernel(config, ParallelConfig(), Device::cpu(), DType::kF32, "",
                                       raw, Tensor(), true);
  MoEKernelBuild off = build_moe_kernel(config, ParallelConfig(), Device::cpu(), DType::kF32, "",
                                        raw, Tensor(), false);
  const int64_t M = 9;
  const std::vector<float> x = testing::random_floats(M * c.H, 3, -2.0f, 2.0f);
  std::vector<int32_t> ids;
  std::vector<float> w;
  moe_test::random_routing(M, c.E, c.k, moe_test::IdPattern::kRandom, 4, ids, w);
  const std::vector<float> w8a16 = reference::experts_fp8(
      config, x, M, ids, w, raw.w13, raw.w13_quant, raw.w2, raw.w2_quant, {}, {}, std::nullopt);
  const std::vector<float> w8a8 = reference::experts_fp8(
      config, x, M, ids, w, raw.w13, raw.w13_quant, raw.w2, raw.w2_quant, {}, {}, 128);
  const std::vector<float> got_off =
      moe_test::run_kernel(*off.kernel, c.H, x, M, ids, w, {}, nullptr);
  const std::vector<float> got_on =
      moe_test::run_kernel(*on.kernel, c.H, x, M, ids, w, {}, nullptr);
  EXPECT_LE(testing::normalized_error(got_off, w8a16), kW8A16Tolerance);
  EXPECT_LE(testing::normalized_error(got_on, w8a8), kW8A8Tolerance);
  // The two modes really differ (activation quantization is ~2^-4 relative per element).
  EXPECT_GT(testing::normalized_error(got_on, w8a16), 1e-3);
}

TEST(Fp8Experts, ShardsFollowTheScaleGroups) {
  // EP: each rank converts its experts with their scales; TP: shards cut on 16-row blocks and on
  // per-projection scales. The shards' partial sums add up to the whole layer.
  const Fp8Case cases[] = {
      {"tp_block16",
       QuantScheme::kFp8Block,
       4,
       2,
       48,
       32,
       MoEActivation::kSiluGated,
       {16, 16},
       {16, 16},
       true},
      {"tp_projection",
       QuantScheme::kFp8PerTensor,
       4,
       2,
       40,
       32,
       MoEActivation::kSiluGated,
       {32, -1},
       GroupShape::per_tensor()},
  };
  for (const Fp8Case& c : cases) {
    SCOPED_TRACE(c.name);
    const MoEConfig config = fp8_config(c);
    const RawExpertWeights raw = random_raw(config, c, 21, ActivationQuant::kNone, -1);
    const int64_t M = 6;
    const std::vector<float> x = testing::random_floats(M * c.H, 5, -2.0f, 2.0f);
    std::vector<int32_t> ids;
    std::vector<float> w;
    moe_test::random_routing(M, c.E, c.k, moe_test::IdPattern::kRandom, 6, ids, w);
    const std::vector<float> want =
        reference::experts_fp8(config, x, M, ids, w, raw.w13, raw.w13_quant, raw.w2, raw.w2_quant,
                               raw.w13_bias, raw.w2_bias, std::nullopt);
    for (const bool ep : {false, true}) {
      std::vector<float> sum(static_cast<size_t>(M * c.H), 0.0f);
      for (int rank = 0; rank < 2; ++rank) {
        // This rank's experts, run without the exchange (prepare/finalize of one rank) so that
        // the partial sums can be added here.
        const ParallelConfig p(2, rank, 1, 0, ep);
        const ExpertsShape shape = local_experts_shape(config, p);
        ExpertsBuild eb{config,
                        shape,
                        Device::cpu(),
                        {},
                        Tensor(),
                        {},
                        MoEQuantConfig(c.scheme, QuantKey(DType::kF8E4M3, DType::kF32, c.g2, true),
                                       QuantKey::unquantized())};
        eb.quantized = convert_fp8_weights(config, p, shape, raw);
        FusedMoEKernel kernel(make_prepare_finalize(ParallelConfig(), shape),
                              cpu_fp8_backend().create(std::move(eb)));
        const std::vector<float> part =
            moe_test::run_kernel(kernel, c.H, x, M, ids, w, {}, nullptr);
        for (size_t i = 0; i < sum.size(); ++i) sum[i] += part[i];
      }
      EXPECT_LE(testing::normalized_error(sum, want), kW8A16Tolerance) << (ep ? "EP" : "TP");
    }
  }
  // A shard that would split a scale group is refused, naming the parallel layout.
  const Fp8Case bad{
      "tp_split_block", QuantScheme::kFp8Block, 4, 2, 48, 24, MoEActivation::kSiluGated, {16, 16},
      {16, 16}};
  const MoEConfig config = fp8_config(bad);
  const RawExpertWeights raw = random_raw(config, bad, 3, ActivationQuant::kNone, -1);
  EXPECT_MG_ERROR(build_moe_kernel(config, ParallelConfig(2, 1, 1, 0, false), Device::cpu(),
                                   DType::kF32, "", raw, Tensor()),
                  "FP8 experts cannot be split this way");
}

}  // namespace
}  // namespace mg
