// op "attn_temperature": Llama-4's attention temperature tuning of NoPE-layer queries,
//   out[t] = x[t] * (1 + attn_scale * ln(1 + floor((positions[t] + 1) / floor_scale))).
#pragma once

#include <cstdint>

namespace mg {

// The multiplier of a row at `position` (fp64; the kernel rounds it to fp32 as HF does). The CUDA
// kernel evaluates the same operations in the same order on the device
// (attn_temperature_cuda.cuh): keep the two in step.
double attn_temperature_factor(int64_t position, double attn_scale, double floor_scale);

// Reference: fp64 loops. x, out [tokens, dim]; positions [tokens].
void attn_temperature_reference(const float* x, const int32_t* positions, int64_t tokens,
                                int64_t dim, float attn_scale, float floor_scale, float* out);

}  // namespace mg
