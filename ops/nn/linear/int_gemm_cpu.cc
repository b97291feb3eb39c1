#include "ops/nn/linear/int_gemm_cpu.h"

#include "framework/core/int_quant.h"
#include "ops/nn/linear/tiled_dequant_gemm_cpu.h"

namespace mg {

void cpu_int_gemm_xwt(const float* x, int64_t n, const Tensor& codes, const WeightQuantization& q,
                      int64_t m, float* y, ThreadPool* pool) {
  MG_ASSERT(q.is_integer() && q.logical_shape.size() >= 2, "cpu_int_gemm_xwt: {} codes {}",
            quant_element_name(q.element), codes.str());
  const int64_t R = q.logical_shape[q.logical_shape.size() - 2], C = q.logical_shape.back();
  const auto fill = [&](int64_t r0, int64_t rows, float* tile) {
    dequantize_int_rows(codes, q, m, r0, r0 + rows, tile);
  };
  cpu_tiled_dequant_gemm_xwt(x, n, R, C, fill, y, pool);
}

}  // namespace mg
