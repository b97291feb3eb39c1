// FP4 (E2M1) test weights and an independent decoder, shared by the FP4 codec, CPU experts and
// CUDA experts tests: the decoder reads E2M1 from its bit fields, not from framework/core/fp4's
// table or the kernels', so it checks them rather than repeating them.
#pragma once

#include <cstdint>
#include <utility>

#include "framework/core/quant.h"
#include "framework/core/tensor.h"

namespace mg::testing {

// E2M1 decoded from its fields: e = bits 1-2, m = bit 0, sign = bit 3.
double independent_e2m1(uint8_t code);

// Random packed codes [lead..., R, C / 2] (two per byte, even column in the low nibble) and
// positive F32 scales around 1 / (6 sqrt(C)) per group of `group_cols`, so that real values are
// O(1 / sqrt(C)) like moe_test::random_weights'.
std::pair<Tensor, WeightQuantization> random_fp4(const Shape& shape, int64_t group_cols,
                                                 uint32_t seed);

// F32 values [lead..., R, C] of packed codes with F32 group scales (q.scale [lead..., R, groups]),
// decoded by independent_e2m1 in fp64 and rounded once.
Tensor independent_dequantize(const Tensor& codes, const WeightQuantization& q);

}  // namespace mg::testing
