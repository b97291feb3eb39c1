#include "ops/nn/linear/int_gemm_cpu.h"

#include <algorithm>
#include <vector>

#include "framework/core/int_quant.h"
#include "framework/core/thread_pool.h"
#include "ops/nn/linear/linear_gemm.h"

namespace mg {

namespace {

// Weight rows dequantized per tile: 128 x C floats per thread, as the FP8 GEMM does.
constexpr int64_t kTileRows = 128;

struct ThreadScratch {
  std::vector<float> tile;
  std::vector<float> tile_out;
};
ThreadScratch& thread_scratch() {
  thread_local ThreadScratch scratch;
  return scratch;
}

float* grown(std::vector<float>& v, int64_t n) {
  if (static_cast<int64_t>(v.size()) < n) v.resize(static_cast<size_t>(n));
  return v.data();
}

}  // namespace

void cpu_int_gemm_xwt(const float* x, int64_t n, const Tensor& codes, const WeightQuantization& q,
                      int64_t m, float* y, ThreadPool* pool) {
  MG_ASSERT(q.is_integer() && q.logical_shape.size() >= 2, "cpu_int_gemm_xwt: {} codes {}",
            quant_element_name(q.element), codes.str());
  const int64_t R = q.logical_shape[q.logical_shape.size() - 2], C = q.logical_shape.back();
  if (n == 0 || R == 0) return;
  auto tiles = [&](int64_t first, int64_t last) {
    ThreadScratch& ts = thread_scratch();
    for (int64_t tile_index = first; tile_index < last; ++tile_index) {
      const int64_t r0 = tile_index * kTileRows;
      const int64_t t = std::min(kTileRows, R - r0);
      float* tile = grown(ts.tile, t * C);
      dequantize_int_rows(codes, q, m, r0, r0 + t, tile);
      float* out = grown(ts.tile_out, n * t);
      cpu_gemm_xwt(x, n, C, tile, t, out, nullptr);
      for (int64_t i = 0; i < n; ++i) std::copy_n(out + i * t, t, y + i * R + r0);
    }
  };
  const int64_t num_tiles = (R + kTileRows - 1) / kTileRows;
  if (pool) {
    pool->parallel_for(num_tiles, tiles, 1);
  } else {
    tiles(0, num_tiles);
  }
}

}  // namespace mg
