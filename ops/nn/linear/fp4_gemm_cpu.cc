#include "ops/nn/linear/fp4_gemm_cpu.h"

#include <algorithm>
#include <vector>

#include "framework/core/fp4.h"
#include "framework/core/thread_pool.h"
#include "ops/nn/linear/linear_gemm.h"

namespace mg {

namespace {

// Weight rows dequantized per tile: 128 x C floats per thread, as the FP8 and integer GEMMs do.
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

void cpu_fp4_gemm_xwt(const float* x, int64_t n, const uint8_t* packed, const float* scale,
                      int64_t R, int64_t C, int64_t group_cols, float* y, ThreadPool* pool) {
  if (n == 0 || R == 0) return;
  MG_ASSERT(C % 2 == 0 && group_cols >= 1, "cpu_fp4_gemm_xwt: C {} group {}", C, group_cols);
  const int64_t sc = (C + group_cols - 1) / group_cols, Cb = C / 2;
  auto tiles = [&](int64_t first, int64_t last) {
    ThreadScratch& ts = thread_scratch();
    for (int64_t tile_index = first; tile_index < last; ++tile_index) {
      const int64_t r0 = tile_index * kTileRows;
      const int64_t t = std::min(kTileRows, R - r0);
      float* tile = grown(ts.tile, t * C);
      for (int64_t r = 0; r < t; ++r) {
        const float* srow = scale + (r0 + r) * sc;
        const uint8_t* wrow = packed + (r0 + r) * Cb;
        float* trow = tile + r * C;
        for (int64_t c = 0; c < C; ++c)
          trow[c] = fp4_e2m1_to_float(fp4_code_at(wrow, c)) * srow[c / group_cols];
      }
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
