#include "ops/nn/linear/fp4_gemm_cpu.h"

#include "framework/core/error.h"
#include "framework/core/fp4.h"
#include "ops/nn/linear/tiled_dequant_gemm_cpu.h"

namespace mg {

void cpu_fp4_gemm_xwt(const float* x, int64_t n, const uint8_t* packed, const float* scale,
                      int64_t R, int64_t C, int64_t group_cols, float* y, ThreadPool* pool) {
  MG_ASSERT(C % 2 == 0 && group_cols >= 1, "cpu_fp4_gemm_xwt: C {} group {}", C, group_cols);
  const int64_t sc = (C + group_cols - 1) / group_cols, Cb = C / 2;
  const auto fill = [&](int64_t r0, int64_t rows, float* tile) {
    for (int64_t r = 0; r < rows; ++r) {
      const float* srow = scale + (r0 + r) * sc;
      const uint8_t* wrow = packed + (r0 + r) * Cb;
      float* trow = tile + r * C;
      for (int64_t c = 0; c < C; ++c)
        trow[c] = fp4_e2m1_to_float(fp4_code_at(wrow, c)) * srow[c / group_cols];
    }
  };
  cpu_tiled_dequant_gemm_xwt(x, n, R, C, fill, y, pool);
}

}  // namespace mg
