#include "ops/nn/linear/linear_gemm.h"

#include <algorithm>

// Our threads split the work; Eigen must stay single-threaded inside each block even if a build
// ever turns OpenMP on.
#define EIGEN_DONT_PARALLELIZE
#include <Eigen/Core>

#include "framework/core/thread_pool.h"

namespace mg {

namespace {

using RowMajorMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// Output features per scheduling unit: a multiple of the SIMD width so blocks start aligned in W.
constexpr int64_t kColumnBlock = 16;
// Below this many multiply-adds per chunk, threading costs more than it saves.
constexpr int64_t kMinChunkFlops = 1 << 16;

// y[:, begin:end] = x · w[begin:end, :]ᵀ on the calling thread.
void gemm_columns(const float* x, int64_t tokens, int64_t in, const float* w, int64_t out, float* y,
                  int64_t begin, int64_t end) {
  Eigen::Map<const RowMajorMatrix> x_mat(x, tokens, in);
  Eigen::Map<const RowMajorMatrix> w_rows(w + begin * in, end - begin, in);
  Eigen::Map<RowMajorMatrix, 0, Eigen::OuterStride<>> y_cols(y + begin, tokens, end - begin,
                                                             Eigen::OuterStride<>(out));
  // Eigen 3.4 switches to GEMV when tokens == 1.
  y_cols.noalias() = x_mat * w_rows.transpose();
}

}  // namespace

void cpu_gemm_xwt(const float* x, int64_t tokens, int64_t in, const float* w, int64_t out, float* y,
                  ThreadPool* pool) {
  if (tokens <= 0 || out <= 0) return;
  if (in <= 0) {
    std::fill(y, y + tokens * out, 0.0f);
    return;
  }
  const int64_t num_blocks = (out + kColumnBlock - 1) / kColumnBlock;
  if (pool == nullptr || pool->size() == 1) {
    gemm_columns(x, tokens, in, w, out, y, 0, out);
    return;
  }
  const int64_t flops_per_block = tokens * in * kColumnBlock;
  const int64_t grain =
      std::max<int64_t>(1, kMinChunkFlops / std::max<int64_t>(1, flops_per_block));
  pool->parallel_for(
      num_blocks,
      [&](int64_t block_begin, int64_t block_end) {
        gemm_columns(x, tokens, in, w, out, y, block_begin * kColumnBlock,
                     std::min(out, block_end * kColumnBlock));
      },
      grain);
}

}  // namespace mg
