// The kernels around cuda_cublaslt_fp8's cuBLASLt GEMMs (ops/moe/cuda/fp8/fp8_cublaslt_prep_cuda.h)
// against host loops: the activation scales in cuBLASLt's VEC128 layout (per expert, outer-
// dimension-major, 16-byte aligned pieces) from per-group and per-token scales over odd expert
// counts with experts that get no rows, and the per-expert bias + activation between the GEMMs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "tests/cuda/cuda_test_util.h"

#ifdef MG_WITH_CUDA
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include "ops/moe/cuda/fp8/fp8_cublaslt_prep_cuda.h"
#endif

namespace mg {
namespace {

#ifdef MG_WITH_CUDA

using testing::DeviceBuffer;

TEST(CudaFp8CublasLtPrep, Vec128ScalesAreOuterMajorPerExpert) {
  MG_REQUIRE_GPU();
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> value(0.1f, 2.0f);
  for (const bool per_token : {false, true}) {
    for (const std::vector<int32_t>& counts :
         {std::vector<int32_t>{3, 0, 5, 1, 0, 9, 2}, std::vector<int32_t>{0, 0, 17}}) {
      const int64_t E = static_cast<int64_t>(counts.size()), k_blocks = 3;
      std::vector<int32_t> offsets(E + 1, 0);
      for (int64_t e = 0; e < E; ++e) offsets[e + 1] = offsets[e] + counts[e];
      const int64_t rows = offsets[E], max_rows = rows + 4, cols = per_token ? 1 : k_blocks;
      std::vector<float> xs(max_rows * cols);
      for (float& v : xs) v = value(rng);
      const int64_t floats = cuda::fp8_vec128_scale_floats(k_blocks, max_rows, E);
      DeviceBuffer d_xs(xs.size() * 4), d_off(offsets.size() * 4), d_out(floats * 4);
      d_xs.upload(xs.data(), xs.size() * 4);
      d_off.upload(offsets.data(), offsets.size() * 4);
      MG_CUDA_CHECK(cudaMemset(d_out.as<void>(), 0, floats * 4));
      cuda::launch_fp8_vec128_scales(d_xs.as<float>(), cols, d_off.as<int32_t>(), E, max_rows,
                                     k_blocks, d_out.as<float>(), nullptr);
      MG_CUDA_CHECK(cudaDeviceSynchronize());
      std::vector<float> out(floats);
      d_out.download(out.data(), floats * 4);
      for (int64_t e = 0; e < E; ++e) {
        const int64_t base = cuda::fp8_vec128_scale_offset(k_blocks, offsets[e], e);
        EXPECT_EQ(base % 4, 0) << "piece of expert " << e << " not 16-byte aligned";
        const int64_t ld = cuda::fp8_lt_rows(counts[e]);
        EXPECT_EQ(ld % 4, 0);
        if (e + 1 < E) {
          EXPECT_LE(base + k_blocks * ld,
                    cuda::fp8_vec128_scale_offset(k_blocks, offsets[e + 1], e + 1));
        }
        for (int64_t kb = 0; kb < k_blocks; ++kb) {
          for (int64_t j = 0; j < counts[e]; ++j) {
            const int64_t r = offsets[e] + j;
            ASSERT_EQ(out[base + kb * ld + j], xs[r * cols + (per_token ? 0 : kb)])
                << "expert " << e << " block " << kb << " row " << j;
          }
        }
      }
      EXPECT_LE(cuda::fp8_vec128_scale_offset(k_blocks, offsets[E - 1], E - 1) +
                    k_blocks * cuda::fp8_lt_rows(counts[E - 1]),
                floats);
    }
  }
}

// The dense layout of the FP8 linear: block kb of row r at kb * ld + r (ld the row count rounded
// up to 4, as cuBLASLt needs), odd row counts.
TEST(CudaFp8CublasLtPrep, DenseVec128ScalesAreOuterMajor) {
  MG_REQUIRE_GPU();
  std::mt19937 rng(8);
  std::uniform_real_distribution<float> value(0.1f, 2.0f);
  for (const bool per_token : {false, true}) {
    for (const int64_t rows : {1, 7, 300}) {
      const int64_t k_blocks = 3, cols = per_token ? 1 : k_blocks;
      std::vector<float> xs(rows * cols);
      for (float& v : xs) v = value(rng);
      const int64_t ld = cuda::fp8_lt_rows(rows);
      DeviceBuffer d_xs(xs.size() * 4), d_out(ld * k_blocks * 4);
      d_xs.upload(xs.data(), xs.size() * 4);
      cuda::launch_fp8_vec128_scales_dense(d_xs.as<float>(), cols, rows, ld, k_blocks,
                                           d_out.as<float>(), nullptr);
      MG_CUDA_CHECK(cudaDeviceSynchronize());
      std::vector<float> out(ld * k_blocks);
      d_out.download(out.data(), out.size() * 4);
      for (int64_t kb = 0; kb < k_blocks; ++kb) {
        for (int64_t r = 0; r < rows; ++r) {
          ASSERT_EQ(out[kb * ld + r], xs[r * cols + (per_token ? 0 : kb)])
              << "rows " << rows << " block " << kb << " row " << r;
        }
      }
    }
  }
}

TEST(CudaFp8CublasLtPrep, BiasAndActivationPerExpert) {
  MG_REQUIRE_GPU();
  const std::vector<int32_t> offsets = {0, 2, 2, 7};  // expert 1 has no rows
  const int64_t E = 3, rows = 7, max_rows = 9, I = 24;
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> value(-2.0f, 2.0f);
  std::vector<__nv_bfloat16> in(max_rows * 2 * I);
  for (auto& v : in) v = __float2bfloat16_rn(value(rng));
  std::vector<float> bias(E * 2 * I);
  for (float& b : bias) b = value(rng);
  DeviceBuffer d_in(in.size() * 2), d_out(max_rows * I * 2), d_off(offsets.size() * 4),
      d_bias(bias.size() * 4);
  d_in.upload(in.data(), in.size() * 2);
  d_off.upload(offsets.data(), offsets.size() * 4);
  d_bias.upload(bias.data(), bias.size() * 4);
  MG_CUDA_CHECK(cudaMemset(d_out.as<void>(), 0xff, max_rows * I * 2));
  cuda::MoEActParams act;
  act.kind = cuda::MoEActKind::kSiluGated;
  cuda::launch_fp8_rows_bias_act<__nv_bfloat16>(d_in.as<void>(), 2 * I, d_out.as<void>(), I,
                                                d_off.as<int32_t>(), E, max_rows,
                                                d_bias.as<float>(), true, true, act, nullptr);
  MG_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<__nv_bfloat16> out(max_rows * I);
  d_out.download(out.data(), out.size() * 2);
  for (int64_t r = 0; r < max_rows; ++r) {
    const int64_t e = r < 2 ? 0 : 2;
    for (int64_t c = 0; c < I; ++c) {
      const float got = __bfloat162float(out[r * I + c]);
      if (r >= rows) {
        uint16_t bits;
        std::memcpy(&bits, &out[r * I + c], 2);
        EXPECT_EQ(bits, 0xffff) << "row " << r << " past the experts' rows was written";
        continue;
      }
      const double g = __bfloat162float(in[r * 2 * I + c]) + bias[e * 2 * I + c];
      const double u = __bfloat162float(in[r * 2 * I + I + c]) + bias[e * 2 * I + I + c];
      const double want = g / (1.0 + std::exp(-g)) * u;
      EXPECT_NEAR(got, want, 1e-2 * std::fabs(want) + 1e-3) << "row " << r << " col " << c;
    }
  }
}

#endif  // MG_WITH_CUDA

}  // namespace
}  // namespace mg
