// The RMSNorm block kernels' register path (rows of 1025..8192 elements at 512 threads,
// rms_norm_cuda.cuh) against the loop kernels it replaced (norm_loop_kernels.h): rms_norm and
// add_rms_norm outputs the same bits in every dtype, with and without a weight, with the sum
// written over its input a, at one row (the decode step's 2048) and several, odd and prime
// lengths, and past the register path (8193, 12289: the loops themselves).
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "tests/cuda/cuda_test_util.h"
#ifdef MG_WITH_CUDA
#include "framework/device/cuda/dtype_dispatch.h"
#include "ops/nn/add_rms_norm/add_rms_norm_cuda.h"
#include "ops/nn/rms_norm/rms_norm_cuda.h"
#include "tests/cuda/norm_loop_kernels.h"
#endif

namespace mg {
namespace {

#ifdef MG_WITH_CUDA

using testing::DeviceBuffer;

// `values` (host F32) in `dtype`, uploaded.
std::unique_ptr<DeviceBuffer> upload(const Tensor& values, DType dtype) {
  const Tensor t = cast_cpu(values, dtype);
  auto buffer = std::make_unique<DeviceBuffer>(t.nbytes());
  buffer->upload(t.raw(), t.nbytes());
  return buffer;
}

std::vector<uint8_t> bytes_of(const DeviceBuffer& b, size_t n) {
  std::vector<uint8_t> out(n);
  MG_CUDA_CHECK(cudaDeviceSynchronize());
  b.download(out.data(), n);
  return out;
}

struct Dims {
  int64_t rows, dim;
};
constexpr Dims kDims[] = {{1, 2048}, {1, 1025}, {3, 2047}, {2, 4096}, {2, 4099},
                          {1, 7168}, {2, 8192}, {1, 8193}, {1, 12289}};

TEST(CudaNormBlock, AddRmsNormRegistersEqualTheLoopsBitForBit) {
  MG_REQUIRE_GPU();
  for (const DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (const Dims s : kDims) {
      for (const bool weight : {true, false}) {
        for (const bool sum_over_a : {false, true}) {
          SCOPED_TRACE(fmt::format("{} rows x {}, {}, weight {}, sum over a {}", s.rows, s.dim,
                                   dtype_name(dtype), weight, sum_over_a));
          const uint32_t seed = static_cast<uint32_t>(s.rows * 131 + s.dim);
          const Tensor a = testing::random_tensor({s.rows, s.dim}, seed, -3.0f, 2.0f);
          const Tensor b = testing::random_tensor({s.rows, s.dim}, seed + 1, -1.0f, 1.0f);
          const Tensor w = testing::random_tensor({s.dim}, seed + 2, 0.5f, 1.5f);
          const size_t bytes = static_cast<size_t>(s.rows * s.dim) * dtype_size(dtype);
          std::vector<uint8_t> sums[2], ys[2];
          for (int path = 0; path < 2; ++path) {
            auto da = upload(a, dtype), db = upload(b, dtype), dw = upload(w, dtype);
            DeviceBuffer sum(bytes), y(bytes);
            cuda::AddRmsNormArgs args;
            args.a = da->as<void>();
            args.b = db->as<void>();
            args.weight = weight ? dw->as<void>() : nullptr;
            args.sum = sum_over_a ? da->as<void>() : sum.as<void>();
            args.y = y.as<void>();
            args.rows = s.rows;
            args.dim = s.dim;
            args.scale = 1.0f;
            args.eps = 1e-5f;
            if (path == 0) {
              cuda::dispatch_float_dtype(dtype, [&](auto tag) {
                cuda::launch_add_rms_norm<decltype(tag)>(args, nullptr);
              });
            } else {
              testing::launch_add_rms_norm_block_loop(dtype, args, nullptr);
            }
            sums[path] = bytes_of(sum_over_a ? *da : sum, bytes);
            ys[path] = bytes_of(y, bytes);
          }
          EXPECT_TRUE(sums[0] == sums[1]);
          EXPECT_TRUE(ys[0] == ys[1]);
        }
      }
    }
  }
}

TEST(CudaNormBlock, RmsNormRegistersEqualTheLoopsBitForBit) {
  MG_REQUIRE_GPU();
  for (const DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (const Dims s : kDims) {
      for (const bool weight : {true, false}) {
        SCOPED_TRACE(
            fmt::format("{} rows x {}, {}, weight {}", s.rows, s.dim, dtype_name(dtype), weight));
        const uint32_t seed = static_cast<uint32_t>(s.rows * 137 + s.dim);
        const Tensor x = testing::random_tensor({s.rows, s.dim}, seed, -3.0f, 2.0f);
        const Tensor w = testing::random_tensor({s.dim}, seed + 2, 0.5f, 1.5f);
        const size_t bytes = static_cast<size_t>(s.rows * s.dim) * dtype_size(dtype);
        auto dx = upload(x, dtype), dw = upload(w, dtype);
        std::vector<uint8_t> ys[2];
        for (int path = 0; path < 2; ++path) {
          DeviceBuffer y(bytes);
          cuda::RmsNormArgs args;
          args.x = dx->as<void>();
          args.weight = weight ? dw->as<void>() : nullptr;
          args.y = y.as<void>();
          args.rows = s.rows;
          args.dim = s.dim;
          args.group = s.dim;
          args.eps = 1e-6f;
          if (path == 0) {
            cuda::dispatch_float_dtype(
                dtype, [&](auto tag) { cuda::launch_rms_norm<decltype(tag)>(args, nullptr); });
          } else {
            testing::launch_rms_norm_block_loop(dtype, args, nullptr);
          }
          ys[path] = bytes_of(y, bytes);
        }
        EXPECT_TRUE(ys[0] == ys[1]);
      }
    }
  }
}

#endif  // MG_WITH_CUDA

}  // namespace
}  // namespace mg
