// Weight-only integer experts on the CPU (oracle module ops/moe/oracle/wna16.h, backend
// cpu_wna16) against the reference on the dequantized weights (reference::experts_wna16), for
// int4 / uint4 / int8 / uint8 codes, groups 32, 64, 128 and channel-wise over sizes that are not
// multiples of the group, biases, experts that receive no tokens, GPTQ act-order on w2 (folded
// at compile time) and on w13 (kept as g_idx), and tensor/expert-parallel shards.
#include <algorithm>
#include <numeric>
#include <random>

#include <gtest/gtest.h>

#include "framework/core/int_quant.h"
#include "ops/moe/experts/cpu_wna16_experts.h"
#include "ops/moe/kernel/prepare_finalize.h"
#include "ops/moe/oracle/wna16.h"
#include "ops/moe/reference/moe_reference.h"
#include "tests/unit/moe/moe_test_util.h"

namespace mg {
namespace {

struct Wna16Case {
  const char* name;
  QuantScheme scheme;
  QuantElement element;
  int64_t E, k, H, I;
  MoEActivation act;
  int64_t group;  // along the input dimension; -1 channel-wise
  bool biases = false;
};

MoEConfig wna16_config(const Wna16Case& c) {
  MoEConfig::Fields f = moe_test::experts_config(c.E, c.k, c.H, c.I, c.act, c.biases).fields();
  f.quant_scheme = c.scheme;
  return MoEConfig(f);
}

// Random values like moe_test's (O(1) activations), quantized by the group quantizer.
std::pair<Tensor, WeightQuantization> random_int(const Shape& shape, const Wna16Case& c,
                                                 uint32_t seed) {
  const float bound = 2.0f / std::sqrt(static_cast<float>(shape.back()));
  return quantize_int_cpu(testing::random_tensor(shape, seed, -bound, bound), c.element, c.group);
}

RawExpertWeights random_raw(const MoEConfig& config, const Wna16Case& c, uint32_t seed) {
  RawExpertWeights raw;
  std::tie(raw.w13, raw.w13_quant) = random_int({c.E, config.w13_rows(), c.H}, c, seed);
  std::tie(raw.w2, raw.w2_quant) = random_int({c.E, c.H, c.I}, c, seed + 2);
  if (c.biases) {
    raw.w13_bias = testing::random_tensor({c.E, config.w13_rows()}, seed + 4, -0.5f, 0.5f);
    raw.w2_bias = testing::random_tensor({c.E, c.H}, seed + 5, -0.5f, 0.5f);
  }
  return raw;
}

// GPTQ act-order: the input columns of every matrix shuffled (column perm[j] holds what column j
// held), with g_idx[perm[j]] = j / g, as GPTQ's desc_act quantizer leaves them. The real matrix
// changes (its columns move); the reference reads the g_idx.
void shuffle_columns(Tensor& codes, WeightQuantization& q, uint32_t seed, int64_t pieces) {
  const int64_t R = q.logical_shape[1], C = q.logical_shape[2], M = q.logical_shape[0];
  const int64_t row_bytes = int_codes_row_bytes(q.element, C);
  q.g_idx = Tensor::empty_cpu(DType::kI32, {M, pieces, C});
  std::mt19937 rng(seed);
  std::vector<int32_t> row(static_cast<size_t>(C)), moved(static_cast<size_t>(C));
  for (int64_t m = 0; m < M; ++m) {
    std::vector<std::vector<int64_t>> perms;
    for (int64_t p = 0; p < pieces; ++p) {
      std::vector<int64_t> perm(static_cast<size_t>(C));
      std::iota(perm.begin(), perm.end(), 0);
      std::shuffle(perm.begin(), perm.end(), rng);
      for (int64_t j = 0; j < C; ++j) {
        q.g_idx.data<int32_t>()[(m * pieces + p) * C + perm[j]] =
            static_cast<int32_t>(j / q.group.cols);
      }
      perms.push_back(std::move(perm));
    }
    for (int64_t r = 0; r < R; ++r) {
      auto* bytes = static_cast<uint8_t*>(codes.raw()) + (m * R + r) * row_bytes;
      for (int64_t c2 = 0; c2 < C; ++c2) row[c2] = int_code_at(bytes, q.element, c2);
      const std::vector<int64_t>& perm = perms[static_cast<size_t>(r / (R / pieces))];
      for (int64_t j = 0; j < C; ++j) moved[perm[j]] = row[j];
      pack_int_codes(moved.data(), 1, C, q.element, bytes);
    }
  }
}

const Wna16Case kCases[] = {
    // W4A16 group 128 over H = 200 (a partial last group) and I = 136.
    {"uint4_g128", QuantScheme::kInt4WeightOnly, QuantElement::kUInt4, 7, 2, 200, 136,
     MoEActivation::kSiluGated, 128},
    {"int4_g32_bias", QuantScheme::kInt4WeightOnly, QuantElement::kInt4, 5, 3, 72, 40,
     MoEActivation::kGeluGated, 32, true},
    {"uint4_g64", QuantScheme::kInt4WeightOnly, QuantElement::kUInt4, 6, 2, 65, 33,
     MoEActivation::kSwigluOai, 64},
    {"int8_channel", QuantScheme::kInt8WeightOnly, QuantElement::kInt8, 4, 1, 40, 24,
     MoEActivation::kReluSquared, -1},
    {"uint8_g32", QuantScheme::kInt8WeightOnly, QuantElement::kUInt8, 5, 2, 47, 31,
     MoEActivation::kSiluGated, 32, true},
};

// The backend dequantizes the same codes the reference does; only fp32 summation order differs.
constexpr double kTolerance = 1e-5;

TEST(Wna16Experts, MatchTheReferenceForEveryFormat) {
  ThreadPool pool(3);
  uint32_t seed = 300;
  for (const Wna16Case& c : kCases) {
    SCOPED_TRACE(c.name);
    const MoEConfig config = wna16_config(c);
    const RawExpertWeights raw = random_raw(config, c, seed += 10);
    MoEKernelBuild build =
        build_moe_kernel(config, ParallelConfig(), Device::cpu(), DType::kF32, "", raw, Tensor());
    EXPECT_EQ(build.choice.backend->name(), "cpu_wna16");
    for (const int64_t M : {1, 7, 33}) {
      for (const auto pattern : {moe_test::IdPattern::kRandom, moe_test::IdPattern::kAllToOne}) {
        const std::vector<float> x = testing::random_floats(M * c.H, ++seed, -2.0f, 2.0f);
        std::vector<int32_t> ids;
        std::vector<float> w;
        moe_test::random_routing(M, c.E, c.k, pattern, ++seed, ids, w);
        const std::vector<float> want =
            reference::experts_wna16(config, x, M, ids, w, raw.w13, raw.w13_quant, raw.w2,
                                     raw.w2_quant, raw.w13_bias, raw.w2_bias);
        const std::vector<float> got =
            moe_test::run_kernel(*build.kernel, c.H, x, M, ids, w, {}, &pool);
        EXPECT_LE(testing::normalized_error(got, want), kTolerance) << "M=" << M;
      }
    }
  }
}

TEST(Wna16Experts, QuantizationIsNearTheFloatWeights) {
  // The codes stand for the float weights they were made from: 8-bit closely, 4-bit roughly (a
  // wrong nibble order or scale layout would be O(1) off).
  for (const Wna16Case& c : {kCases[0], kCases[3]}) {
    const MoEConfig config = wna16_config(c);
    const float bound = 2.0f / std::sqrt(static_cast<float>(c.H));
    const Tensor w13 = testing::random_tensor({c.E, config.w13_rows(), c.H}, 1, -bound, bound);
    const Tensor w2 = testing::random_tensor({c.E, c.H, c.I}, 2, -bound, bound);
    RawExpertWeights raw;
    std::tie(raw.w13, raw.w13_quant) = quantize_int_cpu(w13, c.element, c.group);
    std::tie(raw.w2, raw.w2_quant) = quantize_int_cpu(w2, c.element, c.group);
    MoEKernelBuild build =
        build_moe_kernel(config, ParallelConfig(), Device::cpu(), DType::kF32, "", raw, Tensor());
    const int64_t M = 9;
    const std::vector<float> x = testing::random_floats(M * c.H, 3, -2.0f, 2.0f);
    std::vector<int32_t> ids;
    std::vector<float> w;
    moe_test::random_routing(M, c.E, c.k, moe_test::IdPattern::kRandom, 4, ids, w);
    const std::vector<float> fp = reference::experts(config, x, M, ids, w, w13, {}, w2, {});
    const std::vector<float> got =
        moe_test::run_kernel(*build.kernel, c.H, x, M, ids, w, {}, nullptr);
    EXPECT_LE(testing::normalized_error(got, fp), quant_element_bits(c.element) == 8 ? 0.02 : 0.2);
  }
}

TEST(Wna16Experts, ActOrderIsFoldedOrKept) {
  // w2's act-order is folded into the weights at compile time (intermediate channels permuted);
  // w13's (over H) stays a g_idx per checkpoint matrix (gate, up). Both match the reference,
  // whole and sharded over two TP ranks.
  const Wna16Case c{"act_order",
                    QuantScheme::kInt4WeightOnly,
                    QuantElement::kUInt4,
                    4,
                    2,
                    48,
                    64,
                    MoEActivation::kSiluGated,
                    16,
                    true};
  const MoEConfig config = wna16_config(c);
  RawExpertWeights raw = random_raw(config, c, 41);
  shuffle_columns(raw.w13, raw.w13_quant, 1, 2);
  shuffle_columns(raw.w2, raw.w2_quant, 2, 1);
  const int64_t M = 6;
  const std::vector<float> x = testing::random_floats(M * c.H, 5, -2.0f, 2.0f);
  std::vector<int32_t> ids;
  std::vector<float> w;
  moe_test::random_routing(M, c.E, c.k, moe_test::IdPattern::kRandom, 6, ids, w);
  const std::vector<float> want =
      reference::experts_wna16(config, x, M, ids, w, raw.w13, raw.w13_quant, raw.w2, raw.w2_quant,
                               raw.w13_bias, raw.w2_bias);
  {
    const ExpertsShape shape = local_experts_shape(config, ParallelConfig());
    const QuantizedExpertWeights conv = convert_wna16_weights(config, ParallelConfig(), shape, raw);
    EXPECT_FALSE(conv.w2_quant.g_idx.defined());  // folded
    EXPECT_TRUE(conv.w13_quant.g_idx.defined());  // kept
  }
  for (const bool ep : {false, true}) {
    std::vector<float> sum(static_cast<size_t>(M * c.H), 0.0f);
    for (int rank = 0; rank < 2; ++rank) {
      const ParallelConfig p(2, rank, 1, 0, ep);
      const ExpertsShape shape = local_experts_shape(config, p);
      ExpertsBuild eb{config,
                      shape,
                      Device::cpu(),
                      {},
                      Tensor(),
                      {},
                      wna16_quant_config(config, raw, DType::kF32)};
      eb.quantized = convert_wna16_weights(config, p, shape, raw);
      FusedMoEKernel kernel(make_prepare_finalize(ParallelConfig(), shape),
                            cpu_wna16_backend().create(std::move(eb)));
      const std::vector<float> part = moe_test::run_kernel(kernel, c.H, x, M, ids, w, {}, nullptr);
      for (size_t i = 0; i < sum.size(); ++i) sum[i] += part[i];
    }
    EXPECT_LE(testing::normalized_error(sum, want), kTolerance) << (ep ? "EP" : "TP");
  }
}

// The facts the backends' weights checks see (wna16_weight_facts): code widths and groups, w13's
// act-order kept, w2's folded when its groups are of equal size and kept when not; on the CPU
// the list is cpu_wna16, which takes every layout.
TEST(Wna16Experts, WeightFactsSayWhatTheConversionLeaves) {
  const Wna16Case c{"facts",
                    QuantScheme::kInt4WeightOnly,
                    QuantElement::kUInt4,
                    4,
                    2,
                    48,
                    64,
                    MoEActivation::kSiluGated,
                    16};
  const MoEConfig config = wna16_config(c);
  RawExpertWeights raw = random_raw(config, c, 7);
  ExpertWeightFacts f = wna16_weight_facts(raw);
  EXPECT_EQ(f.w13.bits, 4);
  EXPECT_EQ(f.w2.bits, 4);
  EXPECT_EQ(f.w13.group_cols, 16);
  EXPECT_EQ(f.w2.group_cols, 16);
  EXPECT_FALSE(f.w13.act_order);
  EXPECT_FALSE(f.w2.act_order);
  shuffle_columns(raw.w13, raw.w13_quant, 1, 2);
  shuffle_columns(raw.w2, raw.w2_quant, 2, 1);
  f = wna16_weight_facts(raw);
  EXPECT_TRUE(f.w13.act_order);  // over H: kept
  EXPECT_FALSE(f.w2.act_order);  // equal groups: folded by the conversion
  // Expert 0's channel in group 0 moved to group 1: groups of 15 and 17 cannot be contiguous.
  int32_t* g_idx = raw.w2_quant.g_idx.data<int32_t>();
  const int64_t moved = std::find(g_idx, g_idx + c.I, 0) - g_idx;
  g_idx[moved] = 1;
  EXPECT_TRUE(wna16_weight_facts(raw).w2.act_order);
  // The CPU's list: cpu_wna16 takes it all the same.
  const std::vector<const ExpertsBackend*> cpu = wna16_priority(Device::cpu());
  ASSERT_FALSE(cpu.empty());
  EXPECT_EQ(cpu[0]->name(), "cpu_wna16");
  EXPECT_EQ(cpu[0]->check_weights(f, local_experts_shape(config, ParallelConfig())), "");
}

TEST(Wna16Experts, RefusesShardsThatSplitAGroup) {
  // I = 48 over two ranks: 24 channels each, not a multiple of the group of 16.
  const Wna16Case c{"tp_split",
                    QuantScheme::kInt4WeightOnly,
                    QuantElement::kUInt4,
                    4,
                    2,
                    32,
                    48,
                    MoEActivation::kSiluGated,
                    16};
  const MoEConfig config = wna16_config(c);
  const RawExpertWeights raw = random_raw(config, c, 3);
  EXPECT_MG_ERROR(build_moe_kernel(config, ParallelConfig(2, 1, 1, 0, false), Device::cpu(),
                                   DType::kF32, "", raw, Tensor()),
                  "integer experts cannot be split this way");
  // A forced backend that does not take integer codes says why.
  EXPECT_MG_ERROR(build_moe_kernel(config, ParallelConfig(), Device::cpu(), DType::kF32,
                                   "cpu_eigen", raw, Tensor()),
                  "supports unquantized F32 weights");
}

}  // namespace
}  // namespace mg
