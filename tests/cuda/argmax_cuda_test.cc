// The GPU's greedy picks (argmax_rows_cuda) against the host's mg::argmax and find_non_finite on
// random logits: ties (the lowest index wins; -0.0 equals +0.0), NaN and infinities anywhere in
// the row (the first one's index), rows of one value, rows longer than the block's threads, and
// both kernels (rows of whole float4s or not).
// (engine_cuda_test's greedy requests take their tokens from these picks end to end.)
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "framework/core/finite.h"
#include "framework/runtime/sampler.h"
#include "tests/cuda/cuda_test_util.h"
#ifdef MG_WITH_CUDA
#include "framework/device/cuda/argmax_cuda.h"
#endif

namespace mg {
namespace {

#ifdef MG_WITH_CUDA
// argmax_rows_cuda's picks of `rows` rows of `vocab` logits (the output starts as 0xff bytes).
std::vector<int32_t> device_picks(const std::vector<float>& logits, int64_t rows, int64_t vocab) {
  float* d_logits = nullptr;
  int32_t* d_out = nullptr;
  const size_t out_bytes = static_cast<size_t>(rows) * 2 * sizeof(int32_t);
  MG_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&d_logits), logits.size() * sizeof(float)));
  MG_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&d_out), out_bytes));
  MG_CUDA_CHECK(
      cudaMemcpy(d_logits, logits.data(), logits.size() * sizeof(float), cudaMemcpyHostToDevice));
  MG_CUDA_CHECK(cudaMemset(d_out, 0xff, out_bytes));
  cuda::argmax_rows_cuda(d_logits, rows, vocab, d_out, nullptr);
  std::vector<int32_t> out(static_cast<size_t>(rows) * 2);
  MG_CUDA_CHECK(cudaMemcpy(out.data(), d_out, out_bytes, cudaMemcpyDeviceToHost));
  MG_CUDA_CHECK(cudaFree(d_logits));
  MG_CUDA_CHECK(cudaFree(d_out));
  return out;
}
#endif

TEST(ArgmaxCudaTest, PicksEqualTheHostOnRandomRowsWithTiesAndNonFinite) {
  MG_REQUIRE_GPU();
#ifdef MG_WITH_CUDA
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  std::mt19937 rng(7);
  // Multiples of 4 take the float4 kernel (4100: a last round of loads mostly past the row), the
  // others the scalar one.
  for (int64_t vocab : {1, 4, 7, 255, 256, 1000, 4100, 151936, 151937}) {
    const int64_t rows = 24;
    std::vector<float> logits(static_cast<size_t>(rows * vocab));
    std::uniform_int_distribution<int64_t> any(0, vocab - 1);
    for (int64_t r = 0; r < rows; ++r) {
      float* row = logits.data() + r * vocab;
      // Few distinct values: ties everywhere (row 0: all equal).
      std::uniform_int_distribution<int> level(0, r == 0 ? 0 : 5);
      for (int64_t i = 0; i < vocab; ++i) row[i] = static_cast<float>(level(rng)) * 0.25f - 0.5f;
      switch (r % 8) {
        case 1:  // the max at the last index and again earlier
          row[vocab - 1] = 9.0f;
          row[any(rng)] = 9.0f;
          break;
        case 2:
          row[any(rng)] = nan;
          break;
        case 3:
          row[any(rng)] = inf;
          row[any(rng)] = -inf;
          break;
        case 4:  // -0.0 and +0.0 tie as the max
          for (int64_t i = 0; i < vocab; ++i) row[i] = -1.0f;
          row[any(rng)] = 0.0f;
          row[any(rng)] = -0.0f;
          break;
        case 5:  // no finite value at all
          for (int64_t i = 0; i < vocab; ++i) row[i] = i % 2 ? nan : -inf;
          break;
        default:
          break;
      }
    }
    const std::vector<int32_t> out = device_picks(logits, rows, vocab);
    for (int64_t r = 0; r < rows; ++r) {
      const float* row = logits.data() + r * vocab;
      const int64_t bad = find_non_finite(row, vocab, DType::kF32);
      EXPECT_EQ(out[2 * r + 1], bad) << "vocab " << vocab << " row " << r;
      if (bad >= 0) continue;  // the engine stops such a row with an error, whatever the pick
      EXPECT_EQ(out[2 * r], argmax(std::span<const float>(row, static_cast<size_t>(vocab))))
          << "vocab " << vocab << " row " << r;
    }
  }
#endif
}

// More rows than a grid's y dimension holds (65535): the float4 kernel's clusters loop over them.
TEST(ArgmaxCudaTest, RowsPastTheGridLimitAreAllPicked) {
  MG_REQUIRE_GPU();
#ifdef MG_WITH_CUDA
  const int64_t rows = 70001, vocab = 12;
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> value(-4.0f, 4.0f);
  std::vector<float> logits(static_cast<size_t>(rows * vocab));
  for (float& v : logits) v = value(rng);
  const std::vector<int32_t> out = device_picks(logits, rows, vocab);
  int64_t wrong = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const std::span<const float> row(logits.data() + r * vocab, static_cast<size_t>(vocab));
    wrong += out[2 * r] != argmax(row) || out[2 * r + 1] != -1;
  }
  EXPECT_EQ(wrong, 0) << "of " << rows << " rows";
#endif
}

}  // namespace
}  // namespace mg
