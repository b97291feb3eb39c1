// op "moe" on CUDA compiled for one rank of a TP or TP+EP layout (dp 1): every unquantized CUDA
// expert backend with the rank's expert map and intermediate-size shard, the shared experts'
// shard too. One GPU runs every rank in turn; the collective the runner makes (the TP
// all-reduce of the partial outputs) is left to the test, which sums the ranks' partial outputs
// on the host and compares the sum with the fp64 reference layer. What this cannot show (the
// NCCL all-reduce itself, ranks on different GPUs) tools/multi_gpu_check.sh covers where
// several GPUs are lent.
#include <gtest/gtest.h>

#include "framework/parallel/communicator.h"
#include "ops/moe/moe_params.h"
#include "ops/moe/reference/moe_reference.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/unit/moe/moe_node_util.h"

namespace mg {
namespace {

#ifdef MG_WITH_CUDA

using moe_test::make_moe_node;
using moe_test::MoENode;
using testing::DeviceOp;

// Rank `rank` of `size` whose collectives leave the data as it is: the op's output is then the
// rank's partial sum, which the test adds up itself. Only what a dp-1 layout calls is allowed.
class PartialSumComm final : public Communicator {
 public:
  PartialSumComm(int rank, int size) : rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void all_reduce(void*, int64_t, DType, ReduceOp op, Stream*) override {
    ASSERT_EQ(op, ReduceOp::kSum);
    ++all_reduces;
  }
  void all_gather(const void*, void*, int64_t, DType, Stream*) override { FAIL(); }
  void all_gatherv(const void*, void*, std::span<const int64_t>, DType, Stream*) override {
    FAIL();
  }
  void reduce_scatter(const void*, void*, int64_t, DType, ReduceOp, Stream*) override { FAIL(); }
  void reduce_scatterv(const void*, void*, std::span<const int64_t>, DType, ReduceOp,
                       Stream*) override {
    FAIL();
  }
  void all_to_all(const void*, void*, int64_t, DType, Stream*) override { FAIL(); }
  void all_to_allv(const void*, std::span<const int64_t>, void*, std::span<const int64_t>, DType,
                   Stream*) override {
    FAIL();
  }
  void barrier() override {}
  Communicator& subgroup(std::span<const int> ranks) override {
    if (static_cast<int>(ranks.size()) == size_) return *this;
    EXPECT_EQ(ranks.size(), 1u);  // the DP group of a dp-1 layout: this rank alone
    if (!single_) single_ = std::make_unique<PartialSumComm>(0, 1);
    return *single_;
  }

  int all_reduces = 0;

 private:
  int rank_;
  int size_;
  std::unique_ptr<PartialSumComm> single_;
};

std::vector<Tensor> rounded_inputs(const MoENode& n, const Tensor& x, DType dtype) {
  std::vector<Tensor> in = n.inputs;
  in[moe_input::kX] = x;
  for (size_t i = 0; i < in.size(); ++i) {
    if (i == moe_input::kRouterBias || i == moe_input::kScoreCorrectionBias) continue;
    in[i] = testing::round_through(in[i], dtype);
  }
  return in;
}

struct Layout {
  int tp;
  bool ep;
};

TEST(CudaMoEParallel, RanksOfTpAndEpLayoutsSumToTheReferenceOnEveryBackend) {
  MG_REQUIRE_GPU();
  uint32_t seed = 9100;
  for (const char* family : moe_test::kFamilies) {
    // I and Is split over 2 and 4 ranks into sizes the grouped GEMMs and decode kernels take.
    const MoENode n = make_moe_node(family, seed++, /*E=*/8, /*k=*/2, /*H=*/128, /*I=*/256,
                                    /*Is=*/128);
    for (const auto& d : testing::cuda_dtypes()) {
      // The inputs and their fp64 reference, once per dtype: the reference is the same for every
      // layout and backend (computing it per case made this test take 96 s of host time).
      struct Case {
        int64_t M;
        std::vector<Tensor> in;
        std::vector<float> want;
      };
      std::vector<Case> cases;
      // 1, 3: decode kernels; 17, 64: grouped; 300: past the side-stream threshold.
      for (int64_t M : {1, 3, 17, 64, 300}) {
        const Tensor x = testing::random_tensor({M, 128}, seed++);
        std::vector<Tensor> in = rounded_inputs(n, x, d.dtype);
        std::vector<float> want = reference::moe_forward(moe_config_from_params(n.node.moe()), in);
        cases.push_back({M, std::move(in), std::move(want)});
      }
      for (const Layout layout :
           {Layout{2, false}, Layout{2, true}, Layout{4, false}, Layout{4, true}}) {
        for (const char* backend : {"cuda_moe", "cuda_grouped", "cuda_cublas"}) {
          std::vector<std::unique_ptr<DeviceOp>> ranks;
          std::vector<std::unique_ptr<PartialSumComm>> comms;
          for (int r = 0; r < layout.tp; ++r) {
            const ParallelConfig pc(layout.tp, r, 1, 0, layout.ep);
            ranks.push_back(
                std::make_unique<DeviceOp>(n.node, n.inputs, d.dtype, 256, backend, pc));
            comms.push_back(std::make_unique<PartialSumComm>(r, layout.tp));
            ranks.back()->set_comm(comms.back().get());
          }
          for (const Case& c : cases) {
            std::vector<float> sum(static_cast<size_t>(c.M * 128), 0.0f);
            for (int r = 0; r < layout.tp; ++r) {
              const Tensor out = ranks[r]->run(c.in)[0];
              for (size_t i = 0; i < sum.size(); ++i) sum[i] += out.data<float>()[i];
              EXPECT_GE(comms[r]->all_reduces, 1) << "rank " << r << ": the TP all-reduce";
              comms[r]->all_reduces = 0;
            }
            EXPECT_LE(testing::normalized_error(sum, c.want), d.tolerance)
                << family << " tp=" << layout.tp << " ep=" << layout.ep << " " << backend << " "
                << dtype_name(d.dtype) << " M=" << c.M;
          }
        }
      }
    }
  }
}

#endif  // MG_WITH_CUDA

}  // namespace
}  // namespace mg
