// Small CUDA launchers of the MoE runner and the cuBLAS experts backend: the steps between GEMMs
// that no other kernel fuses. T: float, __half or __nv_bfloat16 (moe_elementwise_cuda_<dtype>.cu).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "ops/moe/cuda/moe_cuda_types.h"

namespace mg::cuda {

// y [n] += x [n] (fp32 add, one rounding): the shared experts' output into the routed output.
template <typename T>
void launch_moe_accumulate(void* y, const void* x, int64_t n, cudaStream_t stream);

// y [rows, cols] *= sigmoid(gate [rows]) per row (Qwen2-MoE's shared_expert_gate).
template <typename T>
void launch_moe_scale_rows_sigmoid(void* y, const void* gate, int64_t rows, int64_t cols,
                                   cudaStream_t stream);

// a [rows, I] = act(h1 [rows, N1]) with N1 = 2I (gated: gate | up) or I (plain).
template <typename T>
void launch_moe_activation(const void* h1, int64_t rows, int64_t inter, const MoEActParams& act,
                           void* a, cudaStream_t stream);

}  // namespace mg::cuda
