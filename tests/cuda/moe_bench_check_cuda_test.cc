// `moegraph bench moe`'s check column (ops/moe/bench/moe_bench_cuda.h): every point is compared
// with the fp64 reference layer on sampled rows, so a lone backend is checked too, the error is
// never trivially 0, and a wrong output fails the check.
#include <gtest/gtest.h>

#include "tests/cuda/cuda_test_util.h"

#ifdef MG_WITH_CUDA
#include <cuda_runtime_api.h>

#include <gmock/gmock.h>

#include "framework/core/int_quant.h"
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

// WNA16 points (bench moe --quant int4-g128 ...) on cuda_wna16, chosen and forced tile, are
// checked against the reference on the packed weights read back through the layout, for signed
// and unsigned codes of both widths, groups and channel-wise; a perturbed output fails.
TEST(CudaMoEBench, Wna16PointsAreCheckedAgainstTheUnpackedWeights) {
  MG_REQUIRE_GPU();
  struct Layout {
    QuantScheme scheme;
    QuantElement element;
    int64_t group;
  };
  for (const Layout l : {Layout{QuantScheme::kInt4WeightOnly, QuantElement::kInt4, 128},
                         Layout{QuantScheme::kInt4WeightOnly, QuantElement::kUInt4, 32},
                         Layout{QuantScheme::kInt8WeightOnly, QuantElement::kInt8, -1},
                         Layout{QuantScheme::kInt8WeightOnly, QuantElement::kUInt8, 64}}) {
    SCOPED_TRACE(fmt::format("{} group {}", quant_element_name(l.element), l.group));
    MoEBenchOptions o = small_options({"cuda_wna16", "cuda_wna16:wna16_mma64"});
    o.shapes = {{"wna16", 256, 128, 8, 2}};
    o.quant = l.scheme;
    o.int_element = l.element;
    o.int_group = l.group;
    o.perturb_checked_output = [](const std::string& backend, const Tensor& out) {
      if (backend != "cuda_wna16:wna16_mma64") return;
      MG_CUDA_CHECK(cudaMemset(out.raw(), 0, out.nbytes() / out.shape()[0]));
    };
    const std::vector<MoEBenchPoint> points = run_moe_bench(o, kCeilings, {});
    ASSERT_EQ(points.size(), 6u);
    for (const MoEBenchPoint& p : points) {
      const bool perturbed = p.backend == "cuda_wna16:wna16_mma64";
      EXPECT_EQ(p.check_failed, perturbed)
          << p.backend << " M=" << p.tokens << " " << p.check_error;
      EXPECT_GT(p.check_error, 0.0);
      EXPECT_GT(p.bytes, 0.0);
    }
  }
}

// A shape whose K is not a multiple of the group, and a backend that cannot read the packed
// weights, are errors that say so.
TEST(CudaMoEBench, Wna16RefusesWhatCudaWna16CannotTake) {
  MG_REQUIRE_GPU();
  MoEBenchOptions o = small_options({"cuda_wna16"});
  o.shapes = {{"h320", 320, 128, 8, 2}};
  o.quant = QuantScheme::kInt4WeightOnly;
  o.int_element = QuantElement::kInt4;
  o.int_group = 128;
  EXPECT_THROW(
      {
        try {
          run_moe_bench(o, kCeilings, {});
        } catch (const Error& e) {
          EXPECT_THAT(e.what(), ::testing::HasSubstr(
                                    "weights: w13: WNA16 weight columns 320 must be a multiple "
                                    "of the group size 128"));
          throw;
        }
      },
      Error);
  o.shapes = {{"wna16", 256, 128, 8, 2}};
  o.backends = {"cuda_dequant"};
  EXPECT_THROW(run_moe_bench(o, kCeilings, {}), Error);
}

// Among several shapes (e.g. the default list, where gpt-oss-120b's 2880 is no multiple of 128),
// one the groups do not divide is skipped with a line saying why; the others are timed.
TEST(CudaMoEBench, Wna16SkipsAShapeItsGroupsDoNotDivide) {
  MG_REQUIRE_GPU();
  MoEBenchOptions o = small_options({"cuda_wna16"});
  o.shapes = {{"h320", 320, 128, 8, 2}, {"wna16", 256, 128, 8, 2}};
  o.quant = QuantScheme::kInt4WeightOnly;
  o.int_element = QuantElement::kInt4;
  o.int_group = 128;
  ::testing::internal::CaptureStderr();
  const std::vector<MoEBenchPoint> points = run_moe_bench(o, kCeilings, {});
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_THAT(err, ::testing::HasSubstr("does not take h320 with 128 groups"));
  ASSERT_FALSE(points.empty());
  for (const MoEBenchPoint& p : points) EXPECT_EQ(p.shape, "wna16");
}

// The floor's expert bytes are a checkpoint's: codes, 16-bit scales, zero points of the codes'
// width for unsigned elements (no GPU needed).
TEST(CudaMoEBench, Wna16FloorCountsCheckpointBytes) {
  // H 256, I 128, group 128: codes 3 * 256 * 128 / 2 = 49152; scale groups 256 * 2 (w13) +
  // 256 * 1 (w2) = 768.
  EXPECT_DOUBLE_EQ(wna16_checkpoint_expert_bytes(256, 128, QuantElement::kInt4, 128),
                   49152.0 + 768 * 2.0);
  EXPECT_DOUBLE_EQ(wna16_checkpoint_expert_bytes(256, 128, QuantElement::kUInt4, 128),
                   49152.0 + 768 * 2.5);
  // Channel-wise int8: codes 98304, one scale per row: 256 + 256 rows.
  EXPECT_DOUBLE_EQ(wna16_checkpoint_expert_bytes(256, 128, QuantElement::kInt8, -1),
                   98304.0 + 512 * 2.0);
  // uint8 group 64 over H 200 (4 groups, the last partial) and I 128 (2): 256 * 4 + 200 * 2.
  EXPECT_DOUBLE_EQ(wna16_checkpoint_expert_bytes(200, 128, QuantElement::kUInt8, 64),
                   3.0 * 200 * 128 + (256 * 4 + 200 * 2) * 3.0);
}

#else

TEST(CudaMoEBench, SkippedWithoutCuda) {
  GTEST_SKIP() << "built without CUDA (MG_CUDA=OFF)";
}

#endif  // MG_WITH_CUDA

}  // namespace
}  // namespace mg
