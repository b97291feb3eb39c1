// op "moe" end to end on one rank: every family shape against the fp64 reference layer, every
// CPU backend, chunking, empty batches, describe(), and clear errors for bad nodes.
#include <gtest/gtest.h>

#include "ops/moe/reference/moe_reference.h"
#include "tests/testing/op_harness.h"
#include "tests/unit/moe/moe_node_util.h"
#include "tests/unit/moe/moe_test_util.h"

namespace mg {
namespace {

using moe_test::make_moe_node;
using moe_test::MoENode;
using moe_test::with_x;

std::vector<float> reference_forward(const MoENode& n, const Tensor& x) {
  return reference::moe_forward(moe_config_from_params(n.node.moe()), with_x(n, x));
}

std::vector<float> run_op(const MoENode& n, const Tensor& x, const std::string& backend = {},
                          int64_t chunk = 0) {
  proto::Node node = n.node;
  node.mutable_moe()->set_dp_chunk_size(chunk);
  CompileOptions options;
  options.moe_backend = backend;
  testing::CompiledOp op(node, with_x(n, x), options, 2);
  const std::vector<Tensor> out = op.run(with_x(n, x));
  return std::vector<float>(out[0].data<float>(), out[0].data<float>() + out[0].numel());
}

TEST(MoEOp, EveryFamilyMatchesTheReferenceOnEveryBackend) {
  uint32_t seed = 1000;
  for (const char* family : moe_test::kFamilies) {
    const MoENode n = make_moe_node(family, seed);
    const Tensor x = testing::random_tensor({29, 32}, seed + 50);
    const std::vector<float> want = reference_forward(n, x);
    for (const char* backend : {"", "cpu_eigen", "cpu_monolithic"}) {
      EXPECT_LE(testing::normalized_error(run_op(n, x, backend), want), moe_test::kTolerance)
          << family << " on " << (*backend ? backend : "auto");
    }
    seed += 100;
  }
}

TEST(MoEOp, ChunkedStepsGiveTheSameOutput) {
  const MoENode n = make_moe_node("deepseek_v3", 7);
  const Tensor x = testing::random_tensor({23, 32}, 8);
  const std::vector<float> whole = run_op(n, x);
  EXPECT_LE(testing::normalized_error(run_op(n, x, "", 5), whole), 1e-6);
  EXPECT_LE(testing::normalized_error(run_op(n, x, "", 1), whole), 1e-6);
  EXPECT_LE(testing::normalized_error(whole, reference_forward(n, x)), moe_test::kTolerance);
}

TEST(MoEOp, NoTokensAndOneToken) {
  const MoENode n = make_moe_node("qwen2_moe", 3);
  EXPECT_TRUE(run_op(n, Tensor::empty_cpu(DType::kF32, {0, 32})).empty());
  const Tensor x = testing::random_tensor({1, 32}, 4);
  EXPECT_LE(testing::normalized_error(run_op(n, x), reference_forward(n, x)), moe_test::kTolerance);
}

TEST(MoEOp, DescribeNamesTheChoiceAndEveryRejectedBackend) {
  const MoENode n = make_moe_node("mixtral", 3);
  testing::CompiledOp op(n.node, n.inputs);
  EXPECT_EQ(op.kernel().describe(),
            "cpu_eigen (auto, prepare/finalize none)\n"
            "  cpu_batched: rejected, activation format: takes batched tokens, but "
            "prepare/finalize none (tp=1/0 dp=1/0 ep=1/0 dispatch=all_gather_reduce_scatter) "
            "gives standard\n"
            "  cpu_monolithic: fits, lower priority");
}

TEST(MoEOp, BackendRequestsFromTheNodeAndFromCompileOptions) {
  MoENode n = make_moe_node("mixtral", 3);
  n.node.mutable_moe()->set_backend("cpu_monolithic");
  EXPECT_EQ(testing::CompiledOp(n.node, n.inputs).kernel().describe().substr(0, 27),
            "cpu_monolithic (requested, ");
  // CompileOptions::moe_backend (moegraph --moe-backend) wins over the node.
  CompileOptions options;
  options.moe_backend = "cpu_eigen";
  EXPECT_EQ(testing::CompiledOp(n.node, n.inputs, options).kernel().describe().substr(0, 22),
            "cpu_eigen (requested, ");
  options.moe_backend = "cpu_batched";
  EXPECT_MG_ERROR(testing::CompiledOp(n.node, n.inputs, options),
                  "MoE backend 'cpu_batched' was requested but cannot run this node: activation "
                  "format");
  options.moe_backend = "cutlass";
  EXPECT_MG_ERROR(testing::CompiledOp(n.node, n.inputs, options), "unknown MoE backend 'cutlass'");
}

std::vector<std::optional<ValueType>> types_of(const MoENode& n) {
  return moe_test::input_types(n.inputs);
}

TEST(MoEOp, BadNodesGiveClearErrors) {
  const MoENode good = make_moe_node("deepseek_v3", 3);
  EXPECT_EQ(testing::infer_op(good.node, types_of(good))[0],
            (ValueType{DType::kF32, {kTokens, 32}}));

  MoENode n = good;
  n.node.mutable_moe()->set_top_k(9);
  EXPECT_MG_ERROR(testing::infer_op(n.node, types_of(n)), "top_k must be in [1, num_experts = 8]");
  n = good;
  n.node.mutable_moe()->mutable_routing()->set_num_groups(3);
  EXPECT_MG_ERROR(testing::infer_op(n.node, types_of(n)), "num_experts (8) must be divisible by");
  n = good;
  n.node.mutable_moe()->mutable_routing()->set_groups_kept(5);
  EXPECT_MG_ERROR(testing::infer_op(n.node, types_of(n)),
                  "groups_kept must be in [1, num_groups = 4]");
  n = good;
  n.inputs[moe_input::kScoreCorrectionBias] = Tensor();
  EXPECT_MG_ERROR(testing::infer_op(n.node, types_of(n)),
                  "input 3 (score_correction_bias) is missing: it is read when "
                  "routing.has_score_correction_bias is set");
  n = good;
  n.inputs[moe_input::kRouterBias] = testing::random_tensor({8}, 1);
  EXPECT_MG_ERROR(testing::infer_op(n.node, types_of(n)),
                  "input 2 (router_bias) is given, but it is only read when "
                  "routing.has_router_bias is set");
  n = good;
  n.inputs[moe_input::kW2] = testing::random_tensor({8, 16, 32}, 1);
  EXPECT_MG_ERROR(testing::infer_op(n.node, types_of(n)),
                  "input 6 (w2, canonical layout) must have shape [8, 32, 16], got F32[8, 16, 32]");
  n = good;
  n.inputs[moe_input::kSharedDown] = testing::random_tensor({24, 32}, 1);
  EXPECT_MG_ERROR(testing::infer_op(n.node, types_of(n)),
                  "input 10 (shared_down) must have shape [32, 24]");
  n = good;
  n.node.mutable_moe()->set_quant_scheme(proto::MOE_QUANT_NVFP4);
  EXPECT_MG_ERROR(testing::infer_op(n.node, types_of(n)),
                  "quant_scheme nvfp4 needs input 4 (w13) quantized to FP4_E2M1");
  n = good;
  n.node.mutable_moe()->set_top_k(1);
  n.node.mutable_moe()->mutable_routing()->set_method(proto::LLAMA4_TOP1_SIGMOID);
  EXPECT_MG_ERROR(testing::infer_op(n.node, types_of(n)), "llama4_top1_sigmoid");
}

}  // namespace
}  // namespace mg
