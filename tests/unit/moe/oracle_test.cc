// The oracle: automatic choice, accepted and refused requests, nothing-fits errors, the order
// of the checks, and the weight conversion it does for the chosen backend.
#include "ops/moe/oracle/oracle.h"

#include <cstring>

#include <gtest/gtest.h>

#include "framework/device/allocator.h"
#include "ops/moe/oracle/unquantized.h"
#include "ops/moe/reference/moe_reference.h"
#include "tests/unit/moe/moe_node_util.h"
#include "tests/unit/moe/moe_test_util.h"

namespace mg {
namespace {

struct Query {
  MoEConfig config = moe_test::experts_config(8, 2, 16, 8, MoEActivation::kSiluGated);
  MoEQuantConfig quant = MoEQuantConfig::unquantized();
  ParallelConfig parallel;
  ExpertsShape shape = local_experts_shape(config, parallel);
  Device device = Device::cpu();

  OracleQuery get(std::string_view requested = {}) const {
    return OracleQuery{device, config, quant, parallel, shape, requested};
  }
};

OracleChoice select_cpu(const OracleQuery& q) {
  const std::vector<const ExpertsBackend*> priority = unquantized_priority(Device::cpu());
  return select_backend(priority, q);
}

TEST(Oracle, PicksCpuEigenOnOneCpuRank) {
  Query q;
  const OracleChoice c = select_cpu(q.get());
  ASSERT_NE(c.backend, nullptr);
  EXPECT_EQ(c.backend->name(), "cpu_eigen");
  EXPECT_FALSE(c.requested);
  ASSERT_EQ(c.verdicts.size(), 3u);
  EXPECT_EQ(c.verdicts[1].name, "cpu_batched");
  EXPECT_EQ(c.describe(),
            "cpu_eigen (auto, prepare/finalize none)\n"
            "  cpu_batched: rejected, activation format: takes batched tokens, but "
            "prepare/finalize none (tp=1/0 dp=1/0 ep=1/0 dispatch=all_gather_reduce_scatter) "
            "gives standard\n"
            "  cpu_monolithic: fits, lower priority");
}

TEST(Oracle, PicksTheBatchedBackendForAllToAllDispatch) {
  Query q;
  q.parallel = ParallelConfig(1, 0, 2, 1, true, MoEDispatch::kAllToAll);
  q.shape = local_experts_shape(q.config, q.parallel);
  const OracleChoice c = select_cpu(q.get());
  EXPECT_EQ(c.backend->name(), "cpu_batched");
  EXPECT_EQ(c.prepare_finalize, "all_to_all");
  EXPECT_EQ(c.verdicts[0].reason,
            "activation format: takes standard tokens, but prepare/finalize all_to_all "
            "(tp=1/0 dp=2/1 ep=2/1 dispatch=all_to_all) gives batched");
}

TEST(Oracle, AcceptsARequestThatFits) {
  Query q;
  const OracleChoice c = select_cpu(q.get("cpu_monolithic"));
  EXPECT_EQ(c.backend->name(), "cpu_monolithic");
  EXPECT_TRUE(c.requested);
  EXPECT_EQ(select_cpu(q.get("auto")).backend->name(), "cpu_eigen");
}

// `backend:kernel` forces one of the backend's kernels; backends with one kernel take none.
TEST(Oracle, KernelRequestsGoToTheBackend) {
  EXPECT_EQ(split_backend_request("cuda_moe:grouped_tma").backend, "cuda_moe");
  EXPECT_EQ(split_backend_request("cuda_moe:grouped_tma").kernel, "grouped_tma");
  EXPECT_EQ(split_backend_request("cpu_eigen").kernel, "");
  Query q;
  EXPECT_MG_ERROR(select_cpu(q.get("cpu_eigen:fast")),
                  "MoE backend 'cpu_eigen' was requested with kernel 'fast', which cannot run: "
                  "cpu_eigen runs one kernel and takes no kernel request");
  const OracleChoice c = select_cpu(q.get("cpu_eigen:auto"));
  EXPECT_EQ(c.backend->name(), "cpu_eigen");
  EXPECT_EQ(c.kernel, "auto");
  EXPECT_EQ(c.describe().substr(0, 42), "cpu_eigen (requested, kernel auto, prepare");
  EXPECT_MG_ERROR(select_cpu(q.get("triton:x")), "unknown MoE backend 'triton'");
}

// The experts a backend builds read their name and form from it.
TEST(Oracle, ExpertsReadTheirDescriptorFromTheirBackend) {
  Query q;
  for (const ExpertsBackend* b : unquantized_priority(Device::cpu())) {
    const std::unique_ptr<Experts> e = b->create(ExpertsBuild{
        q.config, q.shape, Device::cpu(), moe_test::random_weights(q.config, 5), Tensor()});
    EXPECT_EQ(&e->backend(), b);
    EXPECT_EQ(e->name(), b->name());
    EXPECT_EQ(e->is_monolithic(), b->is_monolithic());
    EXPECT_EQ(e->activation_format(), b->activation_format());
  }
}

TEST(Oracle, RefusesARequestThatDoesNotFitWithTheFailedCheck) {
  Query q;
  EXPECT_MG_ERROR(select_cpu(q.get("cpu_batched")),
                  "MoE backend 'cpu_batched' was requested but cannot run this node: activation "
                  "format: takes batched tokens, but prepare/finalize none");
  q.device = Device::cuda(0);
  EXPECT_MG_ERROR(select_cpu(q.get("cpu_eigen")),
                  "'cpu_eigen' was requested but cannot run this node: device: runs on the CPU "
                  "only, not cuda:0");
  EXPECT_MG_ERROR(select_cpu(q.get("triton")),
                  "unknown MoE backend 'triton' for cuda:0; known backends: cpu_eigen, "
                  "cpu_batched, cpu_monolithic");
}

TEST(Oracle, NothingFitsListsEveryBackendWithItsReason) {
  Query q;
  q.device = Device::cuda(0);
  try {
    select_cpu(q.get());
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("no MoE backend can run this node on cuda:0"), std::string::npos) << msg;
    for (const char* name : {"cpu_eigen", "cpu_batched", "cpu_monolithic"}) {
      EXPECT_NE(msg.find(fmt::format("\n  {}: device: runs on the CPU only, not cuda:0", name)),
                std::string::npos)
          << msg;
    }
  }
  // An empty priority list (CUDA in a build without CUDA) says so.
  const std::vector<const ExpertsBackend*> none;
  EXPECT_MG_ERROR(select_backend(none, q.get()), "no backend is built for this device");
  const std::vector<const ExpertsBackend*> cuda = unquantized_priority(Device::cuda(0));
  if (built_with_cuda()) {
    ASSERT_EQ(cuda.size(), 4u);
    EXPECT_EQ(cuda[0]->name(), "cuda_moe");
    EXPECT_EQ(cuda[1]->name(), "cuda_grouped");
    EXPECT_EQ(cuda[2]->name(), "cuda_cublas");
    EXPECT_EQ(cuda[3]->name(), "cuda_padded");
  } else {
    EXPECT_TRUE(cuda.empty());
  }
}

// Every shape the CPU runs has a CUDA backend: the list ends in cuda_padded, which takes hidden and
// intermediate sizes that are not multiples of 8 (odd, even, primes, either alone), where the
// others need 16-byte rows. (Shape checks only: no GPU needed.)
TEST(Oracle, CudaListEndsInABackendForEveryShape) {
  if (!built_with_cuda()) GTEST_SKIP() << "built without CUDA (MG_CUDA=OFF)";
  const std::vector<const ExpertsBackend*> cuda = unquantized_priority(Device::cuda(0));
  ASSERT_EQ(cuda.back()->name(), "cuda_padded");
  struct Dims {
    int64_t H, I;
  };
  for (const Dims d : {Dims{7, 5}, Dims{30, 22}, Dims{37, 53}, Dims{13, 16}, Dims{32, 11},
                       Dims{1, 1}, Dims{2880, 2880}}) {
    for (MoEActivation act : {MoEActivation::kSiluGated, MoEActivation::kGelu}) {
      const MoEConfig config = moe_test::experts_config(8, 2, d.H, d.I, act);
      const ExpertsShape shape = local_experts_shape(config, ParallelConfig());
      EXPECT_EQ(cuda.back()->check_shape(shape), "") << d.H << " x " << d.I;
      const bool aligned = d.H % 8 == 0 && d.I % 8 == 0;
      for (size_t i = 0; i + 1 < cuda.size(); ++i) {
        EXPECT_EQ(cuda[i]->check_shape(shape).empty(), aligned)
            << cuda[i]->name() << " " << d.H << " x " << d.I;
      }
    }
  }
}

// A backend whose checks fail on demand, to pin down the order and first-fit.
class FakeBackend : public ExpertsBackend {
 public:
  FakeBackend(std::string name, bool monolithic, std::string device, std::string quant,
              std::string routing, std::string shape)
      : name_(std::move(name)),
        monolithic_(monolithic),
        device_(std::move(device)),
        quant_(std::move(quant)),
        routing_(std::move(routing)),
        shape_(std::move(shape)) {}
  std::string_view name() const override { return name_; }
  bool is_monolithic() const override { return monolithic_; }
  ActivationFormat activation_format() const override { return ActivationFormat::kStandard; }
  std::string check_device(Device) const override { return device_; }
  std::string check_quant(const MoEQuantConfig&) const override { return quant_; }
  std::string check_activation(const ActivationConfig&) const override { return {}; }
  std::string check_routing(const RoutingConfig&) const override { return routing_; }
  std::string check_parallel(const ParallelConfig&) const override { return {}; }
  std::string check_shape(const ExpertsShape&) const override { return shape_; }
  std::unique_ptr<Experts> create(ExpertsBuild) const override { return nullptr; }

 private:
  std::string name_;
  bool monolithic_;
  std::string device_, quant_, routing_, shape_;
};

TEST(Oracle, ChecksRunInOrderAndTheFirstFitWins) {
  Query q;
  const FakeBackend a("a", false, "no gpu", "no fp8", "", "");
  const FakeBackend b("b", true, "", "", "no grouped routing", "");
  const FakeBackend c("c", false, "", "", "modular ignores routing", "H % 128 != 0");
  const FakeBackend d("d", false, "", "", "modular ignores routing", "");
  const FakeBackend e("e", false, "", "", "", "");
  const std::vector<const ExpertsBackend*> list = {&a, &b, &c, &d, &e};
  const OracleChoice choice = select_backend(list, q.get());
  EXPECT_EQ(choice.backend, &d);
  EXPECT_EQ(choice.verdicts[0].reason, "device: no gpu");
  EXPECT_EQ(choice.verdicts[1].reason, "routing: no grouped routing");
  EXPECT_EQ(choice.verdicts[2].reason, "shape: H % 128 != 0");
  EXPECT_EQ(choice.verdicts[3].reason, "");
  EXPECT_EQ(choice.verdicts[4].reason, "");
  EXPECT_EQ(select_backend(list, q.get("e")).backend, &e);
}

// A FakeBackend that takes w13 scale groups of 128 columns only (ExpertsBackend::check_weights).
class Group128Backend final : public FakeBackend {
 public:
  using FakeBackend::FakeBackend;
  std::string check_weights(const ExpertWeightFacts& w, const ExpertsShape&) const override {
    return w.w13.group_cols == 128 ? ""
                                   : fmt::format("w13 groups of {}, not 128", w.w13.group_cols);
  }
};

// The weights check runs after the shape check, and only where the scheme's module gives the
// weights' facts (OracleQuery::weights; WNA16).
TEST(Oracle, WeightsAreCheckedAfterTheShapeWhereTheSchemeGivesTheirFacts) {
  Query q;
  const Group128Backend a("a", false, "", "", "", "");
  const Group128Backend b("b", false, "", "", "", "H % 128 != 0");
  const FakeBackend c("c", false, "", "", "", "");
  const std::vector<const ExpertsBackend*> list = {&a, &b, &c};
  EXPECT_EQ(select_backend(list, q.get()).backend, &a);  // no facts: not checked
  ExpertWeightFacts facts;
  facts.w13 = {4, 64, false};
  OracleQuery with = q.get();
  with.weights = &facts;
  const OracleChoice choice = select_backend(list, with);
  EXPECT_EQ(choice.backend, &c);
  EXPECT_EQ(choice.verdicts[0].reason, "weights: w13 groups of 64, not 128");
  EXPECT_EQ(choice.verdicts[1].reason, "shape: H % 128 != 0");
  EXPECT_EQ(choice.verdicts[2].reason, "");  // no weights check: any facts
  EXPECT_NE(choice.describe().find("a: rejected, weights: w13 groups of 64, not 128"),
            std::string::npos)
      << choice.describe();
  facts.w13.group_cols = 128;
  EXPECT_EQ(select_backend(list, with).backend, &a);
}

TEST(Oracle, QuantSchemesWithoutAnOracleModuleAreNotSupportedYet) {
  for (QuantScheme s :
       {QuantScheme::kUnquantized, QuantScheme::kFp8Block, QuantScheme::kFp8PerChannel,
        QuantScheme::kFp8PerTensor, QuantScheme::kMxfp4, QuantScheme::kNvfp4,
        QuantScheme::kInt4WeightOnly, QuantScheme::kInt8WeightOnly}) {
    check_quant_scheme_supported(s);
  }
}

// ---- Weight conversion -------------------------------------------------------------------------

// GPT-OSS layout: transposed [E, H, 2I] / [E, I, H], gate and up interleaved, biases, BF16.
TEST(Oracle, ConvertsTransposedInterleavedBf16WeightsOncePerNode) {
  MoEConfig::Fields f =
      moe_test::experts_config(6, 2, 12, 5, MoEActivation::kSwigluOai, true).fields();
  f.layout = ExpertLayout::kTransposed;
  f.gate_up_interleaved = true;
  const MoEConfig config(f);
  RawExpertWeights raw{
      moe_test::to_bf16_tensor(testing::random_tensor({6, 12, 10}, 1, -0.5f, 0.5f)),
      moe_test::to_bf16_tensor(testing::random_tensor({6, 10}, 2)),
      moe_test::to_bf16_tensor(testing::random_tensor({6, 5, 12}, 3, -0.5f, 0.5f)),
      moe_test::to_bf16_tensor(testing::random_tensor({6, 12}, 4))};
  for (const char* backend : {"cpu_eigen", "cpu_monolithic"}) {
    MoEKernelBuild build = build_moe_kernel(config, ParallelConfig(), Device::cpu(), DType::kF32,
                                            backend, raw, Tensor());
    EXPECT_EQ(build.choice.backend->name(), backend);
    const int64_t M = 7;
    const std::vector<float> x = testing::random_floats(M * 12, 5);
    std::vector<int32_t> ids;
    std::vector<float> w;
    moe_test::random_routing(M, 6, 2, moe_test::IdPattern::kRandom, 6, ids, w);
    const std::vector<float> want =
        reference::experts(config, x, M, ids, w, raw.w13, raw.w13_bias, raw.w2, raw.w2_bias);
    if (build.kernel->is_monolithic()) continue;  // routes itself; covered by the op tests
    // The kernel owns its converted copy: clobbering the raw weights changes nothing.
    std::memset(raw.w13.raw(), 0, raw.w13.nbytes());
    const std::vector<float> got =
        moe_test::run_kernel(*build.kernel, 12, x, M, ids, w, {}, nullptr);
    EXPECT_LE(testing::normalized_error(got, want), moe_test::kTolerance);
  }
}

TEST(Oracle, ConvertsTheTensorParallelShardOfEachExpert) {
  // Gated, canonical, not interleaved: shard r of 2 holds gate rows [r I/2, (r+1) I/2) and the
  // same up rows, and w2 columns [r I/2, (r+1) I/2); the w2 bias only on rank 0.
  MoEConfig::Fields f =
      moe_test::experts_config(3, 1, 4, 6, MoEActivation::kSiluGated, true).fields();
  const MoEConfig config(f);
  RawExpertWeights raw{testing::random_tensor({3, 12, 4}, 1), testing::random_tensor({3, 12}, 2),
                       testing::random_tensor({3, 4, 6}, 3), testing::random_tensor({3, 4}, 4)};
  for (int rank = 0; rank < 2; ++rank) {
    const ParallelConfig p(2, rank, 1, 0, false);
    const ExpertsShape shape = local_experts_shape(config, p);
    ASSERT_EQ(shape.intermediate_size, 3);
    const CanonicalExpertWeights w = convert_unquantized_weights(config, p, shape, raw);
    ASSERT_EQ(w.w13.shape(), (Shape{3, 6, 4}));
    for (int64_t e = 0; e < 3; ++e) {
      for (int64_t r = 0; r < 6; ++r) {
        const int64_t src = r < 3 ? rank * 3 + r : 6 + rank * 3 + (r - 3);
        for (int64_t h = 0; h < 4; ++h) {
          EXPECT_EQ(w.w13.data<float>()[(e * 6 + r) * 4 + h],
                    raw.w13.data<float>()[(e * 12 + src) * 4 + h]);
        }
        EXPECT_EQ(w.w13_bias.data<float>()[e * 6 + r], raw.w13_bias.data<float>()[e * 12 + src]);
      }
      for (int64_t h = 0; h < 4; ++h) {
        for (int64_t i = 0; i < 3; ++i) {
          EXPECT_EQ(w.w2.data<float>()[(e * 4 + h) * 3 + i],
                    raw.w2.data<float>()[(e * 4 + h) * 6 + rank * 3 + i]);
        }
      }
    }
    EXPECT_EQ(w.w2_bias.defined(), rank == 0);
  }
  EXPECT_MG_ERROR(local_experts_shape(config, ParallelConfig(4, 0, 1, 0, false)),
                  "intermediate_size 6 cannot be split evenly over 4 tensor-parallel ranks");
}

TEST(Oracle, ConvertsOnlyTheExpertsOfItsEpRank) {
  // 5 experts on 2 EP ranks: rank 1 holds global experts 3 and 4.
  const MoEConfig config = moe_test::experts_config(5, 1, 4, 2, MoEActivation::kReluSquared);
  RawExpertWeights raw{
      testing::random_tensor({5, 2, 4}, 1), {}, testing::random_tensor({5, 4, 2}, 2), {}};
  const ParallelConfig p(1, 0, 2, 1, true);
  const ExpertsShape shape = local_experts_shape(config, p);
  const CanonicalExpertWeights w = convert_unquantized_weights(config, p, shape, raw);
  ASSERT_EQ(w.w13.shape(), (Shape{2, 2, 4}));
  EXPECT_EQ(0, std::memcmp(w.w13.raw(), raw.w13.data<float>() + 3 * 8, 2 * 8 * sizeof(float)));
  EXPECT_EQ(0, std::memcmp(w.w2.raw(), raw.w2.data<float>() + 3 * 8, 2 * 8 * sizeof(float)));
}

}  // namespace
}  // namespace mg
