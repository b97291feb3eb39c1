// The weight-only INT4 / INT8 linear on CUDA (W4A16 / W8A16: GPTQ, AWQ, compressed-tensors dense
// layers) keeps the codes packed on the GPU; linear_int_cuda_kernel.cc builds the device layout
// below once from the canonical one (framework/core/int_quant.h) and picks the path per call:
//
//   rows <= kIntGemvMaxRows (decode): launch_int_gemv, a memory-bound GEMV that streams the codes
//     with 16-byte loads, dequantizes them in registers and accumulates in fp32;
//   more rows (prefill): launch_int_dequant writes the whole weight in the activation dtype into
//     the kernel's workspace, then the BF16/F16 GEMM (GemmXwt, cuBLASLt) runs on it.
//
// Device layout (made at build by linear_int_cuda_kernel.cc):
//   codes   U8 [out, row_bytes]: the canonical rows (two 4-bit codes per byte, even column in the
//           low nibble; or one 8-bit code per byte) with signed codes shifted to unsigned
//           (u = q + 2^(bits-1), the top bit of each code flipped), so every element is
//           real = (u - z) * s with u in [0, 2^bits);
//   params  float2 [out, groups]: {s, 2^23 + z} per output row and input group, z the effective
//           zero in code units (2^(bits-1) for signed or midpoint codes, the checkpoint's zero
//           point otherwise; an integer, so that float(2^23 + u) - (2^23 + z) is u - z exactly:
//           the float with bits 0x4B000000 | u is 2^23 + u, one OR and one subtraction per code).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace mg::cuda {

// Rows of x up to which the linear takes the GEMV (decode steps); above it the dequantize + GEMM
// path. Both kernels read the weight once per call, the GEMV 0.5 (INT4) or 1 (INT8) byte per
// element, the dequantize path that plus the activation-dtype copy written and read again.
// 4: the H100 timing (MG_WNA16_TIMING=1 mg_cuda_tests --gtest_filter='CudaLinearInt.Timing*',
// session 9, int4 g128 on Qwen3-30B-A3B's qkv 5120x2048 / o 2048x4096) timed the GEMV at
// 6.85 / 5.86 us at 1 row (BF16 linear 6.95 / 6.66), 15.08 / 10.25 at 4, but 34-38 us at 5-8 rows,
// where its 8-row variant needs ~230 registers a thread (one block per SM).
constexpr int64_t kIntGemvMaxRows = 4;

struct IntLinearWeights {
  const uint8_t* codes = nullptr;  // [out, row_bytes], unsigned codes (above)
  const float2* params = nullptr;  // [out, groups]: {scale, 2^23 + zero}
  int64_t in = 0;
  int64_t out = 0;
  int64_t row_bytes = 0;  // ceil(in / 2) for 4 bits, in for 8
  int64_t groups = 0;
  // Input columns per group; a channel-wise weight (one group) passes 2^30. group_shift:
  // log2(group_cols) when it is a power of two (a shift instead of a division), else -1.
  int64_t group_cols = 0;
  int group_shift = -1;
  int bits = 4;  // 4 or 8
};

// Whether launch_int_gemv takes the 16-byte-load path for these weights (whole 16-byte code
// chunks per row: in a multiple of 32 codes for 4 bits, 16 for 8; groups of a multiple of 8
// columns or one group), given a 16-byte-aligned x. Otherwise it walks the row one code at a time
// (any in, any group): correct for every shape the CPU takes, slower.
inline bool int_gemv_vectorized(const IntLinearWeights& w) {
  const int64_t chunk_codes = w.bits == 4 ? 32 : 16;
  return w.in % chunk_codes == 0 && (w.groups == 1 || w.group_cols % 8 == 0);
}

struct IntGemvArgs {
  const void* x = nullptr;     // [rows, in], T
  const void* bias = nullptr;  // [out], T (already times alpha), or null
  void* y = nullptr;           // [rows, out], T
  int64_t rows = 0;            // 1..kIntGemvMaxRows
  float alpha = 1.0f;
};

// y = alpha · x · Wᵀ (+ bias). T: __half or __nv_bfloat16 (int_linear_cuda_<dtype>.cu).
template <typename T>
void launch_int_gemv(const IntLinearWeights& w, const IntGemvArgs& args, cudaStream_t stream);

// w_out [out, in] T = the real weight, (u - z) * s rounded once to T.
template <typename T>
void launch_int_dequant(const IntLinearWeights& w, void* w_out, cudaStream_t stream);

}  // namespace mg::cuda
