// op "moe" on 2 and 4 thread-ranks (LocalCommunicator): tensor, data and expert parallelism,
// both dispatches, uneven token counts per DP rank (including none), DP chunks smaller than
// the batch. Every DP rank's output must equal the single-rank reference for its tokens.
#include <gtest/gtest.h>

#include "framework/device/stream.h"
#include "framework/parallel/local_communicator.h"
#include "ops/moe/reference/moe_reference.h"
#include "tests/unit/moe/moe_node_util.h"
#include "tests/unit/moe/moe_test_util.h"
#include "tests/unit/parallel/parallel_test_util.h"

namespace mg {
namespace {

using moe_test::make_moe_node;
using moe_test::MoENode;
using moe_test::with_x;

struct Layout {
  int tp;
  int dp;
  bool ep;
  MoEDispatch dispatch;
  std::string str() const {
    return fmt::format("tp={} dp={} ep={} {}", tp, dp, ep, moe_dispatch_name(dispatch));
  }
};

const Layout kAllGather = {1, 2, true, MoEDispatch::kAllGatherReduceScatter};
const Layout kLayouts[] = {
    {2, 1, false, MoEDispatch::kAllGatherReduceScatter},  // TP
    {4, 1, false, MoEDispatch::kAllGatherReduceScatter},
    {2, 1, true, MoEDispatch::kAllGatherReduceScatter},   // EP over the TP ranks
    {1, 2, false, MoEDispatch::kAllGatherReduceScatter},  // DP, experts split over 2
    kAllGather,                                           // DP + EP, all-gather
    {1, 4, true, MoEDispatch::kAllGatherReduceScatter},
    {1, 2, true, MoEDispatch::kAllToAll},  // DP + EP, all-to-all
    {1, 4, true, MoEDispatch::kAllToAll},
    {2, 2, true, MoEDispatch::kAllGatherReduceScatter},   // TP x DP with EP
    {2, 2, false, MoEDispatch::kAllGatherReduceScatter},  // TP x DP, experts split over 4
};

// Compiles `n` for one rank and runs it on `x`, the way a plan would with ctx.comm set.
std::vector<float> run_rank(const MoENode& n, const Tensor& x, const CompileOptions& options,
                            Communicator* comm) {
  const OpDef& def = *OpRegistry::global().find("moe");
  const std::vector<Tensor> in = with_x(n, x);
  const std::vector<std::optional<ValueType>> types = moe_test::input_types(in);
  std::vector<Tensor> placed(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    const InputSpec& spec = def.inputs()[i];
    if (in[i].defined() && spec.kind == InputKind::kWeight) {
      placed[i] = spec.placement == WeightPlacement::kRaw ? in[i] : to_f32_cpu(in[i]);
    }
  }
  def.infer(n.node, types);
  KernelContext kc{n.node, options, types, placed};
  std::unique_ptr<OpKernel> kernel = def.create_kernel(kc);
  std::unique_ptr<OpState> state = kernel->create_state(StateOptions{options.device, 64});
  std::vector<Tensor> args(in.size());
  for (size_t i = 0; i < in.size(); ++i) args[i] = placed[i].defined() ? placed[i] : in[i];
  Tensor out = Tensor::empty_cpu(DType::kF32, {x.dim(0), x.dim(1)});
  const size_t ws_bytes = kernel->workspace_bytes(options.max_tokens);
  std::vector<uint8_t> workspace(ws_bytes);
  std::unique_ptr<Stream> stream = make_stream(options.device);
  ThreadPool pool(1);
  ExecContext ctx;
  ctx.device = options.device;
  ctx.stream = stream.get();
  ctx.pool = &pool;
  ctx.state = state.get();
  ctx.workspace = workspace.data();
  ctx.workspace_bytes = ws_bytes;
  ctx.comm = comm;
  kernel->run(ctx, args, {&out, 1});
  return std::vector<float>(out.data<float>(), out.data<float>() + out.numel());
}

// Outputs per world rank; DP rank d runs xs[d] on each of its TP ranks.
std::vector<std::vector<float>> run_parallel(const MoENode& n, const Layout& L,
                                             const std::vector<Tensor>& xs,
                                             const std::string& backend = {}) {
  LocalCommGroup group(L.tp * L.dp);
  std::vector<std::vector<float>> outs(static_cast<size_t>(L.tp * L.dp));
  int64_t max_tokens = 1;
  for (const Tensor& x : xs) max_tokens = std::max(max_tokens, x.dim(0));
  parallel_test::run_ranks(group, [&](int rank, Communicator& comm) {
    const int dp_rank = rank / L.tp, tp_rank = rank % L.tp;
    CompileOptions options;
    options.parallel = ParallelConfig(L.tp, tp_rank, L.dp, dp_rank, L.ep, L.dispatch);
    options.moe_backend = backend;
    options.max_tokens = max_tokens;
    outs[static_cast<size_t>(rank)] = run_rank(n, xs[static_cast<size_t>(dp_rank)], options, &comm);
  });
  return outs;
}

void expect_matches_single_rank(const MoENode& n, const Layout& L, const std::vector<Tensor>& xs,
                                const std::vector<std::vector<float>>& outs,
                                const std::string& what) {
  const MoEConfig config = moe_config_from_params(n.node.moe());
  for (int d = 0; d < L.dp; ++d) {
    const std::vector<float> want = reference::moe_forward(config, with_x(n, xs[d]));
    for (int t = 0; t < L.tp; ++t) {
      const std::vector<float>& got = outs[static_cast<size_t>(d * L.tp + t)];
      ASSERT_EQ(got.size(), want.size()) << what;
      if (!want.empty()) {
        EXPECT_LE(testing::normalized_error(got, want), moe_test::kTolerance)
            << what << " dp rank " << d << " tp rank " << t;
      }
      // The TP ranks of a group end with the same all-reduced bits.
      EXPECT_EQ(got, outs[static_cast<size_t>(d * L.tp)]) << what;
    }
  }
}

std::vector<Tensor> dp_inputs(int dp, uint32_t seed) {
  // Uneven on purpose; DP rank 1 of 4 has no tokens at all.
  const int64_t counts2[] = {5, 11};
  const int64_t counts4[] = {7, 0, 13, 3};
  std::vector<Tensor> xs;
  for (int d = 0; d < dp; ++d) {
    const int64_t m = dp == 1 ? 9 : dp == 2 ? counts2[d] : counts4[d];
    xs.push_back(testing::random_tensor({m, 32}, seed + static_cast<uint32_t>(d)));
  }
  return xs;
}

TEST(MoEParallel, EveryLayoutAndFamilyEqualsOneRank) {
  uint32_t seed = 3000;
  for (const Layout& L : kLayouts) {
    for (const char* family : moe_test::kFamilies) {
      for (int64_t chunk : {0, 3}) {
        MoENode n = make_moe_node(family, seed);
        n.node.mutable_moe()->set_dp_chunk_size(chunk);
        const std::vector<Tensor> xs = dp_inputs(L.dp, seed + 500);
        const std::string what = fmt::format("{} {} chunk={}", L.str(), family, chunk);
        expect_matches_single_rank(n, L, xs, run_parallel(n, L, xs), what);
        seed += 10;
      }
    }
  }
}

TEST(MoEParallel, MonolithicBackendUnderTpEpAndAllGather) {
  uint32_t seed = 7000;
  for (const Layout& L : {Layout{2, 1, false, MoEDispatch::kAllGatherReduceScatter},
                          Layout{2, 1, true, MoEDispatch::kAllGatherReduceScatter}, kAllGather,
                          Layout{2, 2, true, MoEDispatch::kAllGatherReduceScatter}}) {
    for (const char* family : {"deepseek_v3", "llama4", "gpt_oss"}) {
      MoENode n = make_moe_node(family, seed);
      n.node.mutable_moe()->set_dp_chunk_size(4);
      const std::vector<Tensor> xs = dp_inputs(L.dp, seed + 1);
      expect_matches_single_rank(n, L, xs, run_parallel(n, L, xs, "cpu_monolithic"),
                                 fmt::format("cpu_monolithic {} {}", L.str(), family));
      seed += 10;
    }
  }
}

TEST(MoEParallel, AllToAllPicksBatchedExpertsAndRefusesMonolithic) {
  const MoENode n = make_moe_node("mixtral", 1);
  const Layout L{1, 2, true, MoEDispatch::kAllToAll};
  EXPECT_MG_ERROR(run_parallel(n, L, dp_inputs(2, 2), "cpu_monolithic"),
                  "MoE backend 'cpu_monolithic' was requested but cannot run this node: "
                  "activation format: takes standard tokens, but prepare/finalize all_to_all");
  CompileOptions options;
  options.parallel = ParallelConfig(1, 0, 2, 0, true, MoEDispatch::kAllToAll);
  const OpDef& def = *OpRegistry::global().find("moe");
  const std::vector<std::optional<ValueType>> types = moe_test::input_types(n.inputs);
  std::vector<Tensor> placed = n.inputs;
  placed[moe_input::kX] = Tensor();
  placed[moe_input::kRouterWeight] = to_f32_cpu(n.inputs[moe_input::kRouterWeight]);
  KernelContext kc{n.node, options, types, placed};
  const std::string described = def.create_kernel(kc)->describe();
  EXPECT_EQ(described.substr(0, 48), "cpu_batched (auto, prepare/finalize all_to_all)\n");
  EXPECT_NE(described.find("parallel: tp=1/0 dp=2/0 ep=2/0 dispatch=all_to_all"), std::string::npos)
      << described;
}

TEST(MoEParallel, ARankWithoutItsCommunicatorIsAnError) {
  const MoENode n = make_moe_node("mixtral", 1);
  CompileOptions options;
  options.parallel = ParallelConfig(2, 1, 1, 0, false);
  EXPECT_MG_ERROR(run_rank(n, testing::random_tensor({3, 32}, 1), options, nullptr),
                  "MoE node compiled for tp=2/1 dp=1/0 ep=1/0 dispatch=all_gather_reduce_scatter "
                  "(rank 1 of 2) runs with no communicator");
}

}  // namespace
}  // namespace mg
