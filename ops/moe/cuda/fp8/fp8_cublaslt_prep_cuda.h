// Kernels around cuBLASLt's FP8 GEMMs for the cuda_cublaslt_fp8 experts
// (ops/moe/experts/cuda_cublaslt_fp8_experts.h): the activation scales in the layout cuBLASLt's
// 128-element block scaling (CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F) reads, and the bias and
// activation that run between the per-expert GEMMs. Host-callable; built only with MG_WITH_CUDA.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "framework/device/host_device.h"
#include "ops/moe/cuda/moe_cuda_types.h"

namespace mg::cuda {

// cuBLASLt's VEC128_32F scales of an operand whose rows are the GEMM's outer dimension: one float
// per (row, 128-wide K block), outer-dimension-major, i.e. block kb of row r at kb * ld + r of the
// operand's own scale buffer, ld its row count. cuBLASLt (13.1, H100) has FP8 GEMMs with these
// scales only for row counts that are multiples of 4 (no algorithm for 1, 6 or 17 rows; 4, 8, 16,
// 64 and 256 run: a probe of every mode and row count on 2026-11-25, docs/quantization.md). So each
// expert's GEMM runs fp8_lt_rows(rows_e) rows: the up to 3 extra rows read the next expert's
// activations (or the buffers' kFp8LtRowSlack rows) and write rows that a later expert's GEMM
// overwrites, since the GEMMs run in expert order on one stream. The experts' activations share
// one scale buffer: expert e's rows [begin_e, begin_e + rows_e) get the piece starting at
// fp8_vec128_scale_offset(k_blocks, begin_e, e), with ld = fp8_lt_rows(rows_e) (16-byte aligned;
// pieces do not overlap, as each expert pads at most 3 rows).
constexpr int64_t kFp8LtRowSlack = 3;
MG_HOST_DEVICE inline int64_t fp8_lt_rows(int64_t rows) {
  return (rows + 3) / 4 * 4;
}
MG_HOST_DEVICE inline int64_t fp8_vec128_scale_offset(int64_t k_blocks, int64_t row_begin,
                                                      int64_t expert) {
  return (k_blocks * (row_begin + kFp8LtRowSlack * expert) + 3) / 4 * 4 + 4 * expert;
}
// Floats of that buffer for at most `max_rows` rows over `num_experts` experts.
inline int64_t fp8_vec128_scale_floats(int64_t k_blocks, int64_t max_rows, int64_t num_experts) {
  return k_blocks * (max_rows + kFp8LtRowSlack * num_experts) + 4 * num_experts + 4;
}

// out (above layout) from xs [max_rows, cols] as launch_fp8_quantize writes it (cols = k_blocks:
// per 128 group; cols = 1: per token, copied to every block). offsets [E + 1] on the device (the
// alignment's expert offsets); rows at or past offsets[E] are skipped. One launch, no host sync.
void launch_fp8_vec128_scales(const float* xs, int64_t cols, const int32_t* offsets,
                              int64_t num_experts, int64_t max_rows, int64_t k_blocks, float* out,
                              cudaStream_t stream);

// The same layout for one dense operand of `rows` rows (no experts) with leading dimension `ld`
// (>= rows; fp8_lt_rows(rows) for cuBLASLt): out[kb * ld + r] = xs[r, cols == 1 ? 0 : kb], xs as
// launch_fp8_quantize writes it; the padding rows are left as they are. The FP8 linear's
// activations.
void launch_fp8_vec128_scales_dense(const float* xs, int64_t cols, int64_t rows, int64_t ld,
                                    int64_t k_blocks, float* out, cudaStream_t stream);

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
