// FP4 (MXFP4, NVFP4) experts on the CPU: the oracle module ops/moe/oracle/fp4.h with backend
// cpu_fp4 against the fp64 reference on weights dequantized here by an independent decoder: every
// activation, GPT-OSS's interleaved gate/up rows with biases and SwiGLU-OAI, sizes that are not
// multiples of the 32 / 16 groups (partial last group), experts that receive no tokens, EP and TP
// shards, refused splits.
#include <cmath>

#include <gtest/gtest.h>

#include "framework/core/fp4.h"
#include "framework/core/fp4_scale_bytes.h"
#include "framework/core/fp8.h"
#include "ops/moe/experts/cpu_fp4_experts.h"
#include "ops/moe/kernel/prepare_finalize.h"
#include "ops/moe/oracle/fp4.h"
#include "ops/moe/reference/moe_reference.h"
#include "tests/testing/fp4_weights.h"
#include "tests/unit/moe/moe_test_util.h"

namespace mg {
namespace {

using testing::independent_dequantize;
using testing::independent_e2m1;
using testing::random_fp4;

struct Fp4Case {
  const char* name;
  QuantScheme scheme;
  int64_t E, k, H, I;
  MoEActivation act;
  bool interleaved = false;
  bool biases = false;
  float swiglu_limit = 0.6f;
};

int64_t group_of(QuantScheme s) {
  return s == QuantScheme::kMxfp4 ? 32 : 16;
}

MoEConfig fp4_config(const Fp4Case& c) {
  MoEConfig::Fields f = moe_test::experts_config(c.E, c.k, c.H, c.I, c.act, c.biases).fields();
  f.quant_scheme = c.scheme;
  f.gate_up_interleaved = c.interleaved;
  f.activation.swiglu_limit = c.swiglu_limit;
  return MoEConfig(f);
}

RawExpertWeights random_raw(const MoEConfig& config, const Fp4Case& c, uint32_t seed) {
  RawExpertWeights raw;
  const int64_t g = group_of(c.scheme);
  std::tie(raw.w13, raw.w13_quant) = random_fp4({c.E, config.w13_rows(), c.H}, g, seed);
  std::tie(raw.w2, raw.w2_quant) = random_fp4({c.E, c.H, c.I}, g, seed + 2);
  if (c.biases) {
    raw.w13_bias = testing::random_tensor({c.E, config.w13_rows()}, seed + 4, -0.5f, 0.5f);
    raw.w2_bias = testing::random_tensor({c.E, c.H}, seed + 5, -0.5f, 0.5f);
  }
  return raw;
}

std::vector<Fp4Case> all_cases() {
  std::vector<Fp4Case> cases = {
      // GPT-OSS as the hub ships it: interleaved gate/up rows, biases, SwiGLU-OAI, at the real
      // limit 7 and at a tight one that the random values reach.
      {"gpt_oss_mxfp4", QuantScheme::kMxfp4, 5, 2, 96, 64, MoEActivation::kSwigluOai, true, true,
       7.0f},
      {"gpt_oss_mxfp4_clamped", QuantScheme::kMxfp4, 5, 2, 96, 64, MoEActivation::kSwigluOai, true,
       true, 0.6f},
      // Sizes that are not multiples of the group: partial last groups of 8 and 6 columns.
      {"mxfp4_partial_groups", QuantScheme::kMxfp4, 7, 3, 72, 38, MoEActivation::kSiluGated},
      {"nvfp4_partial_groups", QuantScheme::kNvfp4, 6, 2, 40, 22, MoEActivation::kSiluGated, false,
       true},
      {"nvfp4_interleaved", QuantScheme::kNvfp4, 4, 2, 48, 32, MoEActivation::kSwigluOai, true,
       true},
  };
  for (const MoEActivation act : moe_test::kAllActivations) {
    for (const QuantScheme s : {QuantScheme::kMxfp4, QuantScheme::kNvfp4}) {
      cases.push_back({"every_activation", s, 5, 2, 64, 48, act});
    }
  }
  return cases;
}

// cpu_fp4 and the reference multiply the same F32 weights; only fp32 summation differs.
constexpr double kTolerance = 1e-5;

TEST(Fp4Experts, MatchTheReferenceOnDequantizedWeights) {
  ThreadPool pool(3);
  uint32_t seed = 300;
  for (const Fp4Case& c : all_cases()) {
    SCOPED_TRACE(
        fmt::format("{} {} {}", c.name, quant_scheme_name(c.scheme), activation_name(c.act)));
    const MoEConfig config = fp4_config(c);
    const RawExpertWeights raw = random_raw(config, c, seed += 10);
    MoEKernelBuild build =
        build_moe_kernel(config, ParallelConfig(), Device::cpu(), DType::kF32, "", raw, Tensor());
    EXPECT_EQ(build.choice.backend->name(), "cpu_fp4");
    EXPECT_NE(build.choice.describe().find("cpu_eigen: rejected, quant: "), std::string::npos)
        << build.choice.describe();
    const Tensor w13 = independent_dequantize(raw.w13, raw.w13_quant);
    const Tensor w2 = independent_dequantize(raw.w2, raw.w2_quant);
    for (const int64_t M : {1, 7, 33}) {
      for (const auto pattern : {moe_test::IdPattern::kRandom, moe_test::IdPattern::kAllToOne}) {
        const std::vector<float> x = testing::random_floats(M * c.H, ++seed, -2.0f, 2.0f);
        std::vector<int32_t> ids;
        std::vector<float> w;
        moe_test::random_routing(M, c.E, c.k, pattern, ++seed, ids, w);
        const std::vector<float> want =
            reference::experts(config, x, M, ids, w, w13, raw.w13_bias, w2, raw.w2_bias);
        const std::vector<float> got =
            moe_test::run_kernel(*build.kernel, c.H, x, M, ids, w, {}, &pool);
        EXPECT_LE(testing::normalized_error(got, want), kTolerance) << "M=" << M;
      }
    }
  }
}

TEST(Fp4Experts, KeysNameTheScaleEncoding) {
  const Fp4Case mx{"mx", QuantScheme::kMxfp4, 4, 2, 64, 32, MoEActivation::kSiluGated};
  const Fp4Case nv{"nv", QuantScheme::kNvfp4, 4, 2, 64, 32, MoEActivation::kSiluGated};
  const MoEQuantConfig qm =
      fp4_quant_config(fp4_config(mx), random_raw(fp4_config(mx), mx, 1), DType::kBF16);
  const MoEQuantConfig qn =
      fp4_quant_config(fp4_config(nv), random_raw(fp4_config(nv), nv, 1), DType::kBF16);
  EXPECT_EQ(qm.str(), "mxfp4(weight U8(scale U8 per [1, 32], static), activation BF16)");
  EXPECT_EQ(qn.str(), "nvfp4(weight U8(scale F8_E4M3 per [1, 16], static), activation BF16)");
  // cpu_fp4 computes in F32 and says why it refuses other keys.
  EXPECT_EQ(cpu_fp4_backend().check_quant(
                fp4_quant_config(fp4_config(mx), random_raw(fp4_config(mx), mx, 1), DType::kF32)),
            "");
  EXPECT_EQ(cpu_fp4_backend().check_quant(qm), "computes weight-only in F32, not activations BF16");
  EXPECT_EQ(cpu_fp4_backend().check_quant(MoEQuantConfig::unquantized()),
            "takes FP4 weights (MXFP4, NVFP4), not unquantized");
}

TEST(Fp4Experts, ShardsFollowTheScaleGroups) {
  // EP: each rank converts its experts; TP: I = 64 cut in two shards of 32 (one MXFP4 group, two
  // NVFP4 groups), interleaved gate/up rows de-interleaved per shard. The shards' partial sums add
  // up to the whole layer.
  const Fp4Case cases[] = {
      {"tp_mxfp4", QuantScheme::kMxfp4, 4, 2, 64, 64, MoEActivation::kSwigluOai, true, true},
      {"tp_nvfp4", QuantScheme::kNvfp4, 4, 2, 48, 64, MoEActivation::kSiluGated, false, true},
  };
  for (const Fp4Case& c : cases) {
    SCOPED_TRACE(c.name);
    const MoEConfig config = fp4_config(c);
    const RawExpertWeights raw = random_raw(config, c, 21);
    const int64_t M = 6;
    const std::vector<float> x = testing::random_floats(M * c.H, 5, -2.0f, 2.0f);
    std::vector<int32_t> ids;
    std::vector<float> w;
    moe_test::random_routing(M, c.E, c.k, moe_test::IdPattern::kRandom, 6, ids, w);
    const std::vector<float> want =
        reference::experts(config, x, M, ids, w, independent_dequantize(raw.w13, raw.w13_quant),
                           raw.w13_bias, independent_dequantize(raw.w2, raw.w2_quant), raw.w2_bias);
    const MoEQuantConfig quant = fp4_quant_config(config, raw, DType::kF32);
    for (const bool ep : {false, true}) {
      std::vector<float> sum(static_cast<size_t>(M * c.H), 0.0f);
      for (int rank = 0; rank < 2; ++rank) {
        const ParallelConfig p(2, rank, 1, 0, ep);
        const ExpertsShape shape = local_experts_shape(config, p);
        ExpertsBuild eb{config, shape, Device::cpu(), {}, Tensor(), {}, quant};
        eb.quantized = convert_fp4_weights(config, p, shape, raw);
        FusedMoEKernel kernel(make_prepare_finalize(ParallelConfig(), shape),
                              cpu_fp4_backend().create(std::move(eb)));
        const std::vector<float> part =
            moe_test::run_kernel(kernel, c.H, x, M, ids, w, {}, nullptr);
        for (size_t i = 0; i < sum.size(); ++i) sum[i] += part[i];
      }
      EXPECT_LE(testing::normalized_error(sum, want), kTolerance) << (ep ? "EP" : "TP");
    }
  }
  // I = 48 over 2 ranks: the shard [24, 48) of w2's columns starts inside a 32-column group.
  const Fp4Case bad{"tp_split", QuantScheme::kMxfp4, 4, 2, 64, 48, MoEActivation::kSiluGated};
  const MoEConfig config = fp4_config(bad);
  EXPECT_MG_ERROR(build_moe_kernel(config, ParallelConfig(2, 1, 1, 0, false), Device::cpu(),
                                   DType::kF32, "", random_raw(config, bad, 3), Tensor()),
                  "FP4 experts cannot be split this way");
}

// fp4_weight_facts says per matrix whether every scale has a one-byte code (cuda_fp4's check):
// arbitrary F32 scales do not; rounded to the E8M0 grid (MXFP4) or to E4M3 times the global of the
// row's gate or up part (NVFP4, globals per part) they do; one scale of the up part moved off the
// grid (1.0625 x its global lies between E4M3's 1 and 1.125) is seen, and only in w13.
TEST(Fp4Experts, WeightFactsSayWhetherEveryScaleHasAByte) {
  for (const QuantScheme scheme : {QuantScheme::kMxfp4, QuantScheme::kNvfp4}) {
    SCOPED_TRACE(quant_scheme_name(scheme));
    const bool mx = scheme == QuantScheme::kMxfp4;
    const Fp4Case c{"c", scheme, 3, 2, 64, 48, MoEActivation::kSiluGated};
    const MoEConfig config = fp4_config(c);
    RawExpertWeights raw = random_raw(config, c, 7);
    ExpertWeightFacts f = fp4_weight_facts(raw, scheme);
    EXPECT_FALSE(f.w13.scales_have_bytes);
    EXPECT_FALSE(f.w2.scales_have_bytes);
    EXPECT_EQ(f.w13.bits, 4);
    EXPECT_EQ(f.w2.group_cols, group_of(scheme));

    // Globals: w13 one per expert and part (gate, up), w2 one per expert.
    const int64_t E = c.E, R13 = config.w13_rows();
    if (!mx) {
      raw.w13_quant.global_scale = Tensor::empty_cpu(DType::kF32, {E, 2});
      raw.w2_quant.global_scale = Tensor::empty_cpu(DType::kF32, {E, 1});
      for (int64_t i = 0; i < 2 * E; ++i) {
        raw.w13_quant.global_scale.data<float>()[i] = std::ldexp(1.0f, -static_cast<int>(i % 5));
      }
      for (int64_t e = 0; e < E; ++e) raw.w2_quant.global_scale.data<float>()[e] = 0.375f;
    }
    const auto round_to_grid = [&](WeightQuantization& q, int64_t R, int64_t S) {
      const int64_t G = q.scale.numel() / (E * R);
      for (int64_t e = 0; e < E; ++e) {
        for (int64_t r = 0; r < R; ++r) {
          const float global = mx ? 1.0f : q.global_scale.data<float>()[e * S + r / (R / S)];
          for (int64_t g = 0; g < G; ++g) {
            float& v = q.scale.data<float>()[(e * R + r) * G + g];
            v = round_fp4_scale(v, mx ? Fp4ScaleGrid::kE8M0 : Fp4ScaleGrid::kE4M3, global);
          }
        }
      }
    };
    round_to_grid(raw.w13_quant, R13, mx ? 1 : 2);
    round_to_grid(raw.w2_quant, c.H, 1);
    f = fp4_weight_facts(raw, scheme);
    EXPECT_TRUE(f.w13.scales_have_bytes);
    EXPECT_TRUE(f.w2.scales_have_bytes);

    // Expert 1, first up row (part 1), group 0.
    const int64_t G13 = raw.w13_quant.scale.numel() / (E * R13);
    const float up_global = mx ? 1.0f : raw.w13_quant.global_scale.data<float>()[1 * 2 + 1];
    raw.w13_quant.scale.data<float>()[(1 * R13 + c.I) * G13] = 1.0625f * up_global;
    f = fp4_weight_facts(raw, scheme);
    EXPECT_FALSE(f.w13.scales_have_bytes);
    EXPECT_TRUE(f.w2.scales_have_bytes);
  }
}

}  // namespace
}  // namespace mg
