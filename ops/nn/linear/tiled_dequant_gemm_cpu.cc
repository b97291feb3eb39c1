#include "ops/nn/linear/tiled_dequant_gemm_cpu.h"

#include <algorithm>
#include <vector>

#include "framework/core/thread_pool.h"
#include "ops/nn/linear/linear_gemm.h"

namespace mg {

namespace {

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

void cpu_tiled_dequant_gemm_xwt(const float* x, int64_t n, int64_t R, int64_t C,
                                const DequantTileFill& fill_tile, float* y, ThreadPool* pool) {
  if (n == 0 || R == 0) return;
  auto tiles = [&](int64_t first, int64_t last) {
    ThreadScratch& ts = thread_scratch();
    for (int64_t tile_index = first; tile_index < last; ++tile_index) {
      const int64_t r0 = tile_index * kDequantTileRows;
      const int64_t t = std::min(kDequantTileRows, R - r0);
      float* tile = grown(ts.tile, t * C);
      fill_tile(r0, t, tile);
      float* out = grown(ts.tile_out, n * t);
      cpu_gemm_xwt(x, n, C, tile, t, out, nullptr);
      for (int64_t i = 0; i < n; ++i) std::copy_n(out + i * t, t, y + i * R + r0);
    }
  };
  const int64_t num_tiles = (R + kDequantTileRows - 1) / kDequantTileRows;
  if (pool) {
    pool->parallel_for(num_tiles, tiles, 1);
  } else {
    tiles(0, num_tiles);
  }
}

}  // namespace mg
