// `moegraph bench moe`'s check column (ops/moe/bench/moe_bench_cuda.h): every point is compared
// with the fp64 reference layer on sampled rows, so a lone backend is checked too, the error is
// never trivially 0, and a wrong output fails the check.
#include <gtest/gtest.h>

#include "tests/cuda/cuda_test_util.h"

#ifdef MG_WITH_CUDA
#include <cuda_runtime_api.h>

#include "framework/device/cuda/cuda_check.h"
#include "ops/moe/bench/moe_bench_cuda.h"
#endif

namespace mg {
namespace {

#ifdef MG_WITH_CUDA

// Ceilings only scale the floor column; the check does not read them.
const MoEBenchCeilings kCeilings{1e12, 1e15, 1e15};

MoEBenchOptions small_options(std::vector<std::string> backends) {
  MoEBenchOptions o;
  o.shapes = {{"small", 64, 48, 8, 2}};
  o.tokens = {1, 7, 40};
  o.backends = std::move(backends);
  o.sets = 1;
  o.target_ms = 1.0;
  return o;
}

TEST(CudaMoEBench, EveryPointIsCheckedAgainstTheReference) {
  MG_REQUIRE_GPU();
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    MoEBenchOptions o = small_options({"cuda_moe"});  // one backend: nothing to compare it with
    o.dtype = dtype;
    const std::vector<MoEBenchPoint> points = run_moe_bench(o, kCeilings, {});
    ASSERT_EQ(points.size(), 3u);
    for (const MoEBenchPoint& p : points) {
      // Rounded 16-bit outputs against fp64: small but not 0 (a self-comparison would be 0).
      EXPECT_GT(p.check_error, 0.0) << dtype_name(dtype) << " M=" << p.tokens;
      EXPECT_LT(p.check_error, moe_bench_check_tolerance(dtype, QuantScheme::kUnquantized))
          << dtype_name(dtype) << " M=" << p.tokens;
      EXPECT_FALSE(p.check_failed);
    }
  }
}

TEST(CudaMoEBench, APerturbedOutputFailsTheCheck) {
  MG_REQUIRE_GPU();
  MoEBenchOptions o = small_options({"cuda_moe", "cuda_grouped"});
  // cuda_grouped's first row of output zeroed after the checked call: the sampled rows always
  // include row 0 here (random logits, no near-tie).
  o.perturb_checked_output = [](const std::string& backend, const Tensor& out) {
    if (backend != "cuda_grouped") return;
    MG_CUDA_CHECK(cudaMemset(out.raw(), 0, out.nbytes() / out.shape()[0]));
  };
  const std::vector<MoEBenchPoint> points = run_moe_bench(o, kCeilings, {});
  ASSERT_EQ(points.size(), 6u);
  for (const MoEBenchPoint& p : points) {
    const bool perturbed = p.backend == "cuda_grouped";
    EXPECT_EQ(p.check_failed, perturbed) << p.backend << " M=" << p.tokens << " " << p.check_error;
    if (perturbed) {
      EXPECT_GT(p.check_error, 0.3) << p.backend << " M=" << p.tokens;
    }
  }
}

// Odd sizes run on cuda_padded, and its points are checked like the others.
TEST(CudaMoEBench, OddShapeOnCudaPaddedPassesTheCheck) {
  MG_REQUIRE_GPU();
  MoEBenchOptions o = small_options({"cuda_padded"});
  o.shapes = {{"odd", 37, 13, 8, 2}};
  for (const MoEBenchPoint& p : run_moe_bench(o, kCeilings, {})) {
    EXPECT_FALSE(p.check_failed) << "M=" << p.tokens << " " << p.check_error;
    EXPECT_GT(p.check_error, 0.0);
  }
}

// FP8 points are checked against the FP8 reference (dequantized codes, activations quantized the
// same way).
TEST(CudaMoEBench, Fp8PointsAreCheckedAgainstTheFp8Reference) {
  MG_REQUIRE_GPU();
  MoEBenchOptions o = small_options({"cuda_fp8"});
  o.shapes = {{"fp8", 256, 128, 8, 2}};
  o.quant = QuantScheme::kFp8PerTensor;
  for (const MoEBenchPoint& p : run_moe_bench(o, kCeilings, {})) {
    EXPECT_FALSE(p.check_failed) << "M=" << p.tokens << " " << p.check_error;
    EXPECT_GT(p.check_error, 0.0);
  }
}

// FP4 points (bench moe --quant mxfp4 | nvfp4) on cuda_fp4 (chosen and forced tile) are checked
// against the reference on the dequantized packed codes, and the floor counts the packed bytes.
TEST(CudaMoEBench, Fp4PointsAreCheckedAgainstTheDequantizedWeights) {
  MG_REQUIRE_GPU();
  for (const QuantScheme quant : {QuantScheme::kMxfp4, QuantScheme::kNvfp4}) {
    SCOPED_TRACE(quant_scheme_name(quant));
    MoEBenchOptions o = small_options({"cuda_fp4", "cuda_fp4:wna16_mma64"});
    o.shapes = {{"fp4", 256, 128, 8, 2}};
    o.quant = quant;
    for (const MoEBenchPoint& p : run_moe_bench(o, kCeilings, {})) {
      EXPECT_FALSE(p.check_failed) << p.backend << " M=" << p.tokens << " " << p.check_error;
      EXPECT_GT(p.check_error, 0.0);
      EXPECT_GT(p.bytes, 0.0);
    }
  }
}

#else

TEST(CudaMoEBench, SkippedWithoutCuda) {
  GTEST_SKIP() << "built without CUDA (MG_CUDA=OFF)";
}

#endif  // MG_WITH_CUDA

}  // namespace
}  // namespace mg
