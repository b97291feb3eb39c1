// The WNA16 oracle module's CUDA choice (ops/moe/oracle/wna16.h): cuda_wna16 is always in the
// priority list and its weights check (ExpertsBackend::check_weights over wna16_weight_facts)
// says why it cannot take a layout: GPTQ act-order on w13, K not a multiple of the group. What
// it refuses goes to cuda_dequant, and the plan listing (OracleChoice::describe, what
// `moegraph inspect --plan` prints per MoE node) names cuda_wna16 as rejected with that reason.
// The selection builds nothing, so these run without a GPU.
#include <gtest/gtest.h>

#include <numeric>
#include <string>
#include <vector>

#include "tests/cuda/cuda_test_util.h"

#ifdef MG_WITH_CUDA
#include "framework/core/int_quant.h"
#include "ops/moe/oracle/oracle.h"
#include "ops/moe/oracle/wna16.h"
#include "tests/testing/test_util.h"
#include "tests/unit/moe/moe_test_util.h"
#endif

namespace mg {
namespace {

#ifdef MG_WITH_CUDA

const Device kGpu = Device::cuda(0);

struct Layer {
  MoEConfig config;
  RawExpertWeights raw;
};

// A Qwen3-shaped W4A16 layer (4 experts, top 2, SiLU-gated), group `group` over H and I.
Layer int4_layer(int64_t H, int64_t I, int64_t group) {
  MoEConfig::Fields f =
      moe_test::experts_config(4, 2, H, I, MoEActivation::kSiluGated, false).fields();
  f.quant_scheme = QuantScheme::kInt4WeightOnly;
  Layer l{MoEConfig(f), {}};
  std::tie(l.raw.w13, l.raw.w13_quant) = quantize_int_cpu(
      testing::random_tensor({4, 2 * I, H}, 1, -0.1f, 0.1f), QuantElement::kUInt4, group);
  std::tie(l.raw.w2, l.raw.w2_quant) = quantize_int_cpu(
      testing::random_tensor({4, H, I}, 2, -0.1f, 0.1f), QuantElement::kUInt4, group);
  return l;
}

// A GPTQ act-order g_idx [E, pieces, C] over `q`'s columns: column c in group (C - 1 - c) / g
// (every group the same size, in reverse column order; desc_act leaves such permutations).
Tensor act_order_g_idx(const WeightQuantization& q, int64_t pieces) {
  const int64_t E = q.logical_shape[0], C = q.logical_shape[2], g = q.group.cols;
  Tensor t = Tensor::empty_cpu(DType::kI32, {E, pieces, C});
  for (int64_t i = 0; i < E * pieces; ++i) {
    for (int64_t c = 0; c < C; ++c) {
      t.data<int32_t>()[i * C + c] = static_cast<int32_t>((C - 1 - c) / g);
    }
  }
  return t;
}

// The oracle's choice on a GPU for `l` (nothing is built).
OracleChoice choose(const Layer& l, std::string_view requested = "") {
  const MoEQuantConfig quant = wna16_quant_config(l.config, l.raw, DType::kBF16);
  const ExpertWeightFacts facts = wna16_weight_facts(l.raw);
  ExpertsShape shape = local_experts_shape(l.config, ParallelConfig());
  shape.dtype = DType::kBF16;
  const ParallelConfig parallel;
  return select_backend(wna16_priority(kGpu),
                        OracleQuery{kGpu, l.config, quant, parallel, shape, requested, &facts});
}

TEST(CudaWna16Oracle, ListsCudaWna16FirstThenCudaDequant) {
  const std::vector<const ExpertsBackend*> list = wna16_priority(kGpu);
  ASSERT_GE(list.size(), 3u);
  EXPECT_EQ(list[0]->name(), "cuda_wna16");
  EXPECT_EQ(list[1]->name(), "cuda_dequant");
}

TEST(CudaWna16Oracle, ChoosesCudaWna16ForWholeContiguousGroups) {
  const OracleChoice c = choose(int4_layer(256, 128, 128));
  ASSERT_NE(c.backend, nullptr);
  EXPECT_EQ(c.backend->name(), "cuda_wna16") << c.describe();
  EXPECT_EQ(c.verdicts[0].reason, "");
}

TEST(CudaWna16Oracle, ActOrderW13IsRejectedWithTheReason) {
  Layer l = int4_layer(256, 128, 64);
  l.raw.w13_quant.g_idx = act_order_g_idx(l.raw.w13_quant, 2);  // gate and up matrices
  const OracleChoice c = choose(l);
  ASSERT_NE(c.backend, nullptr);
  EXPECT_EQ(c.backend->name(), "cuda_dequant");
  const std::string plan = c.describe();
  EXPECT_NE(plan.find("cuda_wna16: rejected, weights: w13 has act-order groups (GPTQ desc_act"),
            std::string::npos)
      << plan;
  // Forced, it is an error naming the same check, never a fallback.
  EXPECT_MG_ERROR(choose(l, "cuda_wna16"),
                  "'cuda_wna16' was requested but cannot run this node: weights: w13 has "
                  "act-order groups");
}

TEST(CudaWna16Oracle, ActOrderW2OfEqualGroupsIsFoldedAndStaysOnCudaWna16) {
  Layer l = int4_layer(256, 128, 64);
  l.raw.w2_quant.g_idx = act_order_g_idx(l.raw.w2_quant, 1);
  EXPECT_FALSE(wna16_weight_facts(l.raw).w2.act_order);
  const OracleChoice c = choose(l);
  ASSERT_NE(c.backend, nullptr);
  EXPECT_EQ(c.backend->name(), "cuda_wna16") << c.describe();
  // Groups of unequal size (expert 0's last column, of group 0, moved to group 1) cannot be made
  // contiguous: the g_idx is kept and cuda_wna16 refuses it.
  l.raw.w2_quant.g_idx.data<int32_t>()[127] = 1;
  EXPECT_TRUE(wna16_weight_facts(l.raw).w2.act_order);
  const OracleChoice kept = choose(l);
  EXPECT_EQ(kept.backend->name(), "cuda_dequant");
  EXPECT_NE(kept.describe().find("cuda_wna16: rejected, weights: w2 has act-order groups"),
            std::string::npos)
      << kept.describe();
}

TEST(CudaWna16Oracle, KNotAMultipleOfTheGroupIsRejectedWithTheReason) {
  // H = 320 over groups of 128: w13's rows end in a partial group of 64.
  const OracleChoice h = choose(int4_layer(320, 128, 128));
  EXPECT_EQ(h.backend->name(), "cuda_dequant");
  EXPECT_NE(h.describe().find("cuda_wna16: rejected, weights: w13: WNA16 weight columns 320 must "
                              "be a multiple of the group size 128"),
            std::string::npos)
      << h.describe();
  // I = 96 over groups of 64: w2's.
  const OracleChoice i = choose(int4_layer(256, 96, 64));
  EXPECT_EQ(i.backend->name(), "cuda_dequant");
  EXPECT_NE(i.describe().find("cuda_wna16: rejected, weights: w2: WNA16 weight columns 96 must be "
                              "a multiple of the group size 64"),
            std::string::npos)
      << i.describe();
  // Channel-wise groups take any K.
  EXPECT_EQ(choose(int4_layer(320, 96, -1)).backend->name(), "cuda_wna16");
}

#else

TEST(CudaWna16Oracle, SkippedWithoutCuda) {
  GTEST_SKIP() << "built without CUDA (MG_CUDA=OFF)";
}

#endif  // MG_WITH_CUDA

}  // namespace
}  // namespace mg
