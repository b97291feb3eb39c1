// The GEMV path of linear on CUDA (ops/nn/linear/linear_gemv_cuda.h), forced for 1..8 rows of x
// (the linear op chooses it up to gemv_chosen_rows(out) rows on 16-byte rows), for every dtype and
// any shape: `in` and `out` odd, primes, not multiples of 8 (scalar loads), multiples of 8 (16-byte
// loads), few output features with a long `in` (several warps split one feature) and many short
// ones; with and without bias and scale. Each result is checked against an fp64 loop over the same
// dtype-rounded inputs, every element of the output is written (DeviceOp poisons it with NaN) and
// nothing past it (guard bytes).
#include <gtest/gtest.h>

#include "tests/cuda/cuda_test_util.h"

#ifdef MG_WITH_CUDA
#include "framework/device/cuda/cuda_check.h"
#include "framework/device/cuda/dtype_dispatch.h"
#include "ops/nn/linear/linear_gemm_cuda.h"
#include "ops/nn/linear/linear_gemv_cuda.h"
#endif

namespace mg {
namespace {

#ifdef MG_WITH_CUDA

struct GemvShape {
  int64_t in, out;
};

// fp64 y = (x wᵀ + b) * scale over host F32 tensors.
std::vector<float> reference_linear(const Tensor& x, const Tensor& w, const Tensor* b,
                                    float scale) {
  const int64_t rows = x.dim(0), in = x.dim(1), out = w.dim(0);
  std::vector<float> y(static_cast<size_t>(rows * out));
  for (int64_t t = 0; t < rows; ++t) {
    for (int64_t o = 0; o < out; ++o) {
      double acc = b ? b->data<float>()[o] : 0.0;
      for (int64_t i = 0; i < in; ++i) {
        acc += static_cast<double>(x.data<float>()[t * in + i]) * w.data<float>()[o * in + i];
      }
      y[t * out + o] = static_cast<float>(acc * scale);
    }
  }
  return y;
}

void expect_linear_matches(const GemvShape& s, int64_t rows, DType dtype, double tolerance,
                           bool bias, float scale) {
  SCOPED_TRACE(fmt::format("{} rows x in {} x out {}, {}, bias {}, scale {}", rows, s.in, s.out,
                           dtype_name(dtype), bias, scale));
  proto::Node node;
  node.set_name("proj");
  node.set_op("linear");
  node.mutable_linear()->set_has_bias(bias);
  if (scale != 1.0f) node.mutable_linear()->set_scale(scale);
  const uint32_t seed = static_cast<uint32_t>(s.in * 131 + s.out * 7 + rows);
  const Tensor x = testing::round_through(testing::random_tensor({rows, s.in}, seed), dtype);
  const Tensor w = testing::round_through(testing::random_tensor({s.out, s.in}, seed + 1), dtype);
  const Tensor b = testing::round_through(testing::random_tensor({s.out}, seed + 2), dtype);
  std::vector<Tensor> inputs = {x, w};
  if (bias) inputs.push_back(b);
  testing::DeviceOp op(node, inputs, dtype);
  const bool aligned = (s.in * static_cast<int64_t>(dtype_size(dtype))) % 16 == 0 &&
                       (s.out * static_cast<int64_t>(dtype_size(dtype))) % 16 == 0;
  EXPECT_EQ(op.kernel().describe().find(fmt::format(
                "gemv up to {} rows", cuda::gemv_chosen_rows(s.out))) != std::string::npos,
            aligned)
      << op.kernel().describe();
  const std::vector<Tensor> out = op.run(inputs);
  const std::vector<float> ref = reference_linear(x, w, bias ? &b : nullptr, scale);
  EXPECT_LE(
      testing::normalized_error(
          std::span<const float>(out[0].data<float>(), static_cast<size_t>(out[0].numel())), ref),
      tolerance);
  // The GEMV kernel itself at this row count, whatever the op's rule chooses: alpha = scale and
  // no bias (the op folds bias x scale into its own bias tensor).
  const Tensor dx = testing::upload(x, dtype, nullptr), dw = testing::upload(w, dtype, nullptr);
  cuda::GemmXwt forced(dtype, s.in, s.out, nullptr, 0);
  forced.set_gemv_max_rows(cuda::kGemvMaxRows);
  Tensor dy = empty_tensor(Device::cuda(0), dtype, {rows, s.out});
  testing::DeviceBuffer ws(cuda::GemmXwt::kWorkspaceBytes);
  forced.run(dx.raw(), rows, dw.raw(), dy.raw(), scale, ws.as<void>(),
             cuda::GemmXwt::kWorkspaceBytes, nullptr);
  MG_CUDA_CHECK(cudaDeviceSynchronize());
  const Tensor got = testing::download_f32(dy, nullptr);
  EXPECT_LE(testing::normalized_error(
                std::span<const float>(got.data<float>(), static_cast<size_t>(got.numel())),
                reference_linear(x, w, nullptr, scale)),
            tolerance)
      << "forced GEMV";
}

TEST(CudaGemv, LinearOfOneToEightRowsMatchesAnFp64LoopInEveryDtypeAndShape) {
  MG_REQUIRE_GPU();
  const GemvShape shapes[] = {
      {1, 7},       // in 1: one element per row
      {27, 19},     // odd: scalar loads
      {36, 5},      // 72-byte BF16 rows (not 16-byte multiples), 144-byte F32 rows (multiples)
      {64, 3},      // vector loads, fewer features than a block
      {101, 257},   // primes
      {2048, 5},    // a long row split over 8 warps
      {4096, 513},  // split-K, a partial last block
      {136, 1000},  // 8 warps of 1 feature each; in a multiple of 8, not of 32
  };
  for (const testing::DtypeTolerance& d : testing::cuda_dtypes()) {
    for (const GemvShape& s : shapes) {
      for (int64_t rows = 1; rows <= 8; ++rows) {
        expect_linear_matches(s, rows, d.dtype, d.tolerance, /*bias=*/rows % 2 == 1,
                              /*scale=*/rows == 3 ? 0.5f : 1.0f);
      }
    }
  }
}

// Past the chosen rows the op leaves the GEMV for cuBLASLt; the two paths agree at the boundary.
TEST(CudaGemv, NineRowsTakeCublasAndAgreeWithTheGemv) {
  MG_REQUIRE_GPU();
  for (const testing::DtypeTolerance& d : testing::cuda_dtypes()) {
    expect_linear_matches({256, 96}, 9, d.dtype, d.tolerance, true, 1.0f);
    expect_linear_matches({256, 96}, 8, d.dtype, d.tolerance, true, 1.0f);
  }
}

// 8 weight loads in flight per lane (GemvArgs::loads_in_flight; kernels take it up to 2 rows on
// 16-byte rows) sum each lane's chunks in the same order as 4, so both give the same floats, and
// both match the fp64 loop: one GEMV and one split GEMV (the fused q/k/v launch), rows 1 and 2,
// rows of one round of loads and of several, a feature split over warps, a partial last block;
// at the rule's warp target and at 4096 and 16384 forced (GemvArgs::target_warps: features split
// over other warp counts).
TEST(CudaGemv, EightLoadsInFlightGiveTheFloatsOfFour) {
  MG_REQUIRE_GPU();
  const GemvShape shapes[] = {{2048, 96}, {4096, 40}, {136, 1000}, {8, 3}, {2056, 513}};
  for (const testing::DtypeTolerance& d : testing::cuda_dtypes()) {
    for (const GemvShape& s : shapes) {
      for (int64_t rows = 1; rows <= 2; ++rows) {
        SCOPED_TRACE(
            fmt::format("{} rows x in {} x out {}, {}", rows, s.in, s.out, dtype_name(d.dtype)));
        const uint32_t seed = static_cast<uint32_t>(s.in * 17 + s.out + rows);
        const Tensor x =
            testing::round_through(testing::random_tensor({rows, s.in}, seed), d.dtype);
        const Tensor w =
            testing::round_through(testing::random_tensor({s.out, s.in}, seed + 1), d.dtype);
        const Tensor dx = testing::upload(x, d.dtype, nullptr);
        const Tensor dw = testing::upload(w, d.dtype, nullptr);
        const std::vector<float> ref = reference_linear(x, w, nullptr, 1.0f);
        for (const int64_t target : {int64_t{0}, int64_t{4096}, int64_t{16384}}) {
          std::vector<Tensor> results;
          for (const int loads : {4, 8}) {
            Tensor dy = empty_tensor(Device::cuda(0), d.dtype, {rows, s.out});
            cuda::GemvArgs a;
            a.x = dx.raw();
            a.w = dw.raw();
            a.y = dy.raw();
            a.rows = rows;
            a.in = s.in;
            a.out = s.out;
            a.loads_in_flight = loads;
            a.target_warps = target;
            // The split launch of the same weight as two row blocks (out - out / 3 and out / 3).
            const int64_t first = s.out - s.out / 3;
            Tensor dy_first = empty_tensor(Device::cuda(0), d.dtype, {rows, first});
            Tensor dy_rest = empty_tensor(Device::cuda(0), d.dtype, {rows, s.out - first});
            cuda::GemvSplitArgs sa;
            sa.x = dx.raw();
            sa.w = dw.raw();
            sa.rows = rows;
            sa.in = s.in;
            sa.loads_in_flight = loads;
            sa.target_warps = target;
            sa.num_blocks = s.out - first > 0 ? 2 : 1;
            sa.blocks[0] = {dy_first.raw(), nullptr, first};
            sa.blocks[1] = {dy_rest.raw(), nullptr, s.out - first};
            cuda::dispatch_float_dtype(d.dtype, [&](auto tag) {
              using T = decltype(tag);
              cuda::launch_gemv<T, T>(a, nullptr);
              cuda::launch_gemv_split<T>(sa, nullptr);
            });
            MG_CUDA_CHECK(cudaDeviceSynchronize());
            const Tensor got = testing::download_f32(dy, nullptr);
            EXPECT_LE(
                testing::normalized_error(
                    std::span<const float>(got.data<float>(), static_cast<size_t>(got.numel())),
                    ref),
                d.tolerance)
                << loads << " loads, target " << target;
            // The split's blocks, joined row by row, against the fp64 loop too.
            const Tensor got_first = testing::download_f32(dy_first, nullptr);
            const Tensor got_rest = testing::download_f32(dy_rest, nullptr);
            Tensor split = empty_tensor(Device::cpu(), DType::kF32, {rows, s.out});
            for (int64_t t = 0; t < rows; ++t) {
              for (int64_t o = 0; o < s.out; ++o) {
                split.data<float>()[t * s.out + o] =
                    o < first ? got_first.data<float>()[t * first + o]
                              : got_rest.data<float>()[t * (s.out - first) + o - first];
              }
            }
            EXPECT_LE(
                testing::normalized_error(
                    std::span<const float>(split.data<float>(), static_cast<size_t>(split.numel())),
                    ref),
                d.tolerance)
                << loads << " loads, split, target " << target;
            results.push_back(got);
            results.push_back(split);
          }
          // results: {gemv 4, split 4, gemv 8, split 8}; 8 loads gives the floats of 4.
          for (int k = 0; k < 2; ++k) {
            for (int64_t i = 0; i < results[k].numel(); ++i) {
              ASSERT_EQ(results[k].data<float>()[i], results[k + 2].data<float>()[i])
                  << (k == 0 ? "gemv" : "split") << " element " << i << ", target " << target;
            }
          }
        }
      }
    }
  }
}

#endif  // MG_WITH_CUDA

}  // namespace
}  // namespace mg
