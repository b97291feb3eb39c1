// The CUDA kernels of embedding, rms_norm, linear, rope, add and gated_mlp against their CPU
// references over the shared op case table (tests/testing/op_cases.cc, the cases the CPU op tests
// run), in BF16, F16 and F32. Inputs are random (never zero) and rounded through the dtype first,
// so the reference sees exactly what the kernel sees and the error left is the kernel's
// arithmetic and its output rounding. The ops that only imported checkpoints use are in
// importer_ops_cuda_test.cc, attention in attention_cuda_test.cc.
#include <gtest/gtest.h>

#include <cmath>

#include "tests/cuda/cuda_test_util.h"
#include "tests/unit/ops/nn_test_util.h"

namespace mg {
namespace {

#ifdef MG_WITH_CUDA

using testing::DeviceOp;

TEST(CudaOps, EmbeddingMatchesReference) {
  MG_REQUIRE_GPU();
  testing::expect_cuda_cases_match_reference("embedding");
}

TEST(CudaOps, EmbeddingWritesNanRowsForIdsOutsideTheVocabulary) {
  MG_REQUIRE_GPU();
  proto::Node node;
  node.set_name("embed");
  node.set_op("embedding");
  node.mutable_embedding();
  const Tensor table = testing::random_tensor({50, 8}, 1);
  DeviceOp op(node, {testing::i32_tensor({1}), table}, DType::kBF16);
  std::vector<Tensor> out = op.run({testing::i32_tensor({3, 50, -7}), table});
  const float* y = out[0].data<float>();
  for (int64_t h = 0; h < 8; ++h) {
    EXPECT_TRUE(std::isfinite(y[h]));
    EXPECT_TRUE(std::isnan(y[8 + h]));
    EXPECT_TRUE(std::isnan(y[16 + h]));
  }
}

TEST(CudaOps, RmsNormMatchesReference) {
  MG_REQUIRE_GPU();
  testing::expect_cuda_cases_match_reference("rms_norm");
}

TEST(CudaOps, LinearMatchesReference) {
  MG_REQUIRE_GPU();
  testing::expect_cuda_cases_match_reference("linear");
}

TEST(CudaOps, RopeMatchesReferenceForEveryPairingAndScaling) {
  MG_REQUIRE_GPU();
  testing::expect_cuda_cases_match_reference("rope");
}

TEST(CudaOps, AddMatchesReference) {
  MG_REQUIRE_GPU();
  testing::expect_cuda_cases_match_reference("add");
}

TEST(CudaOps, GatedMlpMatchesReference) {
  MG_REQUIRE_GPU();
  testing::expect_cuda_cases_match_reference("gated_mlp");
}

TEST(CudaOps, KernelsDescribeTheirDtype) {
  MG_REQUIRE_GPU();
  proto::Node node;
  node.set_name("proj");
  node.set_op("linear");
  node.mutable_linear();
  const Tensor x = testing::random_tensor({2, 16}, 1);
  const Tensor w = testing::random_tensor({8, 16}, 2);
  DeviceOp op(node, {x, w}, DType::kF16);
  EXPECT_EQ(op.kernel().describe(), "cuda cublasLt F16, gemv up to 4 rows");  // a narrow weight
}

// Rows that are not 16-byte multiples (in 27 or out 19 in BF16; in 36, out 5 in F32: 20-byte
// rows) go through cublasGemmEx above the GEMV's 8 rows (11 here), with the same result as the
// reference (the op-case table's linear cases of these shapes) and bias included.
TEST(CudaOps, UnalignedRowsTakeCublasGemmEx) {
  MG_REQUIRE_GPU();
  constexpr int64_t kRows = 11;
  proto::Node node;
  node.set_name("proj");
  node.set_op("linear");
  node.mutable_linear()->set_has_bias(true);
  struct Dims {
    int64_t in, out;
    DType dtype;
    bool cublaslt;
  };
  for (const Dims d : {Dims{27, 19, DType::kBF16, false}, Dims{32, 19, DType::kBF16, false},
                       Dims{36, 5, DType::kF32, false}, Dims{36, 8, DType::kF32, true},
                       Dims{24, 16, DType::kBF16, true}}) {
    const Tensor x = testing::random_tensor({kRows, d.in}, 3);
    const Tensor w = testing::random_tensor({d.out, d.in}, 4);
    const Tensor b = testing::random_tensor({d.out}, 5);
    DeviceOp op(node, {x, w, b}, d.dtype);
    EXPECT_EQ(op.kernel().describe(),
              fmt::format("cuda {} {}{}",
                          d.cublaslt ? "cublasLt" : "cublasGemmEx (rows not 16-byte aligned)",
                          dtype_name(d.dtype), d.cublaslt ? ", gemv up to 4 rows" : ""))
        << d.in << " x " << d.out;
    const Tensor xr = testing::round_through(x, d.dtype), wr = testing::round_through(w, d.dtype),
                 br = testing::round_through(b, d.dtype);
    const std::vector<Tensor> out = op.run({xr, wr, br});
    std::vector<float> ref(kRows * d.out);
    for (int64_t t = 0; t < kRows; ++t) {
      for (int64_t o = 0; o < d.out; ++o) {
        double acc = br.data<float>()[o];
        for (int64_t i = 0; i < d.in; ++i) {
          acc +=
              static_cast<double>(xr.data<float>()[t * d.in + i]) * wr.data<float>()[o * d.in + i];
        }
        ref[t * d.out + o] = static_cast<float>(acc);
      }
    }
    EXPECT_LE(
        testing::normalized_error(
            std::span<const float>(out[0].data<float>(), static_cast<size_t>(out[0].numel())), ref),
        d.dtype == DType::kF32 ? 1e-5 : 1e-2)
        << d.in << " x " << d.out;
  }
}

#endif  // MG_WITH_CUDA

TEST(CudaOps, ActivationDtypeIsCheckedPerDevice) {
  CompileOptions cpu;
  EXPECT_EQ(activation_dtype_of(cpu), DType::kF32);
  cpu.activation_dtype = DType::kBF16;
  testing::expect_error([&] { activation_dtype_of(cpu); },
                        {"activation dtype BF16 is not supported on cpu"});
  CompileOptions gpu;
  gpu.device = Device::cuda(0);
  EXPECT_EQ(activation_dtype_of(gpu), DType::kBF16);
  gpu.activation_dtype = DType::kF16;
  EXPECT_EQ(activation_dtype_of(gpu), DType::kF16);
  gpu.activation_dtype = DType::kF8E4M3;
  testing::expect_error(
      [&] { activation_dtype_of(gpu); },
      {"activation dtype F8_E4M3 is not supported on cuda:0", "BF16, F16 or F32"});
}

}  // namespace
}  // namespace mg
