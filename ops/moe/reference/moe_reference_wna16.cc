// The weight-only integer experts' reference: dequantize (framework/core/int_quant.h's
// definition, one element at a time) and run the unquantized reference.
#include "framework/core/int_quant.h"
#include "ops/moe/reference/moe_reference.h"

namespace mg::reference {

std::vector<float> experts_wna16(const MoEConfig& config, std::span<const float> x, int64_t rows,
                                 std::span<const int32_t> ids, std::span<const float> weights,
                                 const Tensor& w13, const WeightQuantization& w13_quant,
                                 const Tensor& w2, const WeightQuantization& w2_quant,
                                 const Tensor& w13_bias, const Tensor& w2_bias) {
  MG_ASSERT(w13_quant.is_integer() && w2_quant.is_integer(), "experts_wna16: not integer codes");
  return experts(config, x, rows, ids, weights, dequantize_int_cpu(w13, w13_quant), w13_bias,
                 dequantize_int_cpu(w2, w2_quant), w2_bias);
}

}  // namespace mg::reference
