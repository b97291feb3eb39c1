// Kernels around cuBLASLt's FP8 GEMMs for the cuda_cublaslt_fp8 experts
// (ops/moe/experts/cuda_cublaslt_fp8_experts.h): the activation scales in the layout cuBLASLt's
// 128-element block scaling (CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F) reads, and the bias and
// activation that run between the per-expert GEMMs. Host-callable; built only with MG_WITH_CUDA.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "ops/moe/cuda/moe_cuda_types.h"

namespace mg::cuda {

// cuBLASLt's VEC128_32F scales of an operand whose rows are the GEMM's outer dimension: one float
// per (row, 128-wide K block), outer-dimension-major, i.e. block kb of row r at kb * rows + r of
// the operand's own scale buffer. The experts' activations share one buffer: expert e's rows
// [begin_e, begin_e + rows_e) of the permuted activations get the piece starting at
// fp8_vec128_scale_offset(k_blocks, begin_e, e) (16-byte aligned, pieces do not overlap).
inline int64_t fp8_vec128_scale_offset(int64_t k_blocks, int64_t row_begin, int64_t expert) {
  return (k_blocks * row_begin + 3) / 4 * 4 + 4 * expert;
}
// Floats of that buffer for at most `max_rows` rows over `num_experts` experts.
inline int64_t fp8_vec128_scale_floats(int64_t k_blocks, int64_t max_rows, int64_t num_experts) {
  return k_blocks * max_rows + 4 * num_experts + 4;
}

// out (above layout) from xs [max_rows, cols] as launch_fp8_quantize writes it (cols = k_blocks:
// per 128 group; cols = 1: per token, copied to every block). offsets [E + 1] on the device (the
// alignment's expert offsets); rows at or past offsets[E] are skipped. One launch, no host sync.
void launch_fp8_vec128_scales(const float* xs, int64_t cols, const int32_t* offsets,
                              int64_t num_experts, int64_t max_rows, int64_t k_blocks, float* out,
                              cudaStream_t stream);

// The same layout for one dense operand of `rows` rows (no experts): out[kb * rows + r] =
// xs[r, cols == 1 ? 0 : kb], xs as launch_fp8_quantize writes it. The FP8 linear's activations.
void launch_fp8_vec128_scales_dense(const float* xs, int64_t cols, int64_t rows, int64_t k_blocks,
                                    float* out, cudaStream_t stream);

// Per row r of the permuted rows (r < offsets[E]), with e its expert:
//   activation: out[r, c] = act(in[r, c] + bias[e, c], in[r, n_out + c] + bias[e, n_out + c])
//               (gated; plain: act(in[r, c] + bias[e, c], 0)), c < n_out, in [rows, n_in]
//   otherwise:  out[r, c] = in[r, c] + bias[e, c] (n_in == n_out; out may be in)
// T is __nv_bfloat16 or __half; bias F32 [E, n_in] or null; offsets [E + 1] on the device.
template <typename T>
void launch_fp8_rows_bias_act(const void* in, int64_t n_in, void* out, int64_t n_out,
                              const int32_t* offsets, int64_t num_experts, int64_t max_rows,
                              const float* bias, bool activation, bool gated,
                              const MoEActParams& act, cudaStream_t stream);

}  // namespace mg::cuda
