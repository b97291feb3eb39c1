#include "ops/moe/cpu_gemm.h"

#include <algorithm>

#define EIGEN_DONT_PARALLELIZE
#include <Eigen/Core>

#include "framework/core/thread_pool.h"

namespace mg {

namespace {

using RowMajorMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// y[:, begin:end] = x . w[begin:end, :]^T on the calling thread.
void gemm_columns(const float* x, int64_t rows, int64_t in, const float* w, int64_t out, float* y,
                  int64_t begin, int64_t end) {
  Eigen::Map<const RowMajorMatrix> xm(x, rows, in);
  Eigen::Map<const RowMajorMatrix> wm(w + begin * in, end - begin, in);
  Eigen::Map<RowMajorMatrix, 0, Eigen::OuterStride<>> ym(y + begin, rows, end - begin,
                                                         Eigen::OuterStride<>(out));
  ym.noalias() = xm * wm.transpose();
}

}  // namespace

void moe_gemm_xwt(const float* x, int64_t rows, int64_t in, const float* w, int64_t out, float* y,
                  ThreadPool* pool) {
  if (rows <= 0 || out <= 0) return;
  if (in <= 0) {
    std::fill(y, y + rows * out, 0.0f);
    return;
  }
  if (pool == nullptr || pool->size() == 1) {
    gemm_columns(x, rows, in, w, out, y, 0, out);
    return;
  }
  // Split the output features in blocks of 16 (SIMD-aligned starts in w).
  constexpr int64_t kBlock = 16;
  const int64_t blocks = (out + kBlock - 1) / kBlock;
  const int64_t grain = std::max<int64_t>(1, (1 << 16) / std::max<int64_t>(1, rows * in * kBlock));
  pool->parallel_for(
      blocks,
      [&](int64_t b0, int64_t b1) {
        gemm_columns(x, rows, in, w, out, y, b0 * kBlock, std::min(out, b1 * kBlock));
      },
      grain);
}

}  // namespace mg
