// cuBLASLt's FP8 GEMM with 128-element block scales on both operands, shared by the FP8 `linear`
// on CUDA (W8A8) and the cuda_cublaslt_fp8 routed experts (ops/moe/experts/):
//   y [rows, n] (BF16/F16) = alpha * x [rows, k] (e4m3, VEC128 scales) . w [n, k]^T (e4m3, VEC128)
// Scales: cuBLASLt 12.9+ on sm_90 takes FP32 block scales on both operands. Both run as
// CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F (one float per row per 128-wide K block, block kb of row
// r at kb * rows + r): a weight's 128 x 128 blocks, per-channel and per-tensor scales are all
// expanded to that once at build (lt_fp8_vec128_weight_scales), and per-token activation scales
// are copied to every K block (launch_fp8_vec128_scales*,
// ops/moe/cuda/fp8/fp8_cublaslt_prep_cuda.h). So one scale-mode pair serves every FP8 layout;
// cuBLASLt's BLK128x128_32F mode (fewer scale reads) and OUTER_VEC_32F (per channel x per token)
// are not used. Built only with MG_WITH_CUDA.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "framework/core/dtype.h"
#include "framework/core/quant.h"
#include "framework/core/tensor.h"

namespace mg::cuda {

inline constexpr int64_t kLtFp8Block = 128;  // cuBLASLt's VEC128 block along K
// cuBLASLt workspace one GEMM call may use; callers reserve it in their workspace.
inline constexpr size_t kLtFp8WorkspaceBytes = size_t{32} << 20;

inline int64_t lt_fp8_k_blocks(int64_t k) {
  return (k + kLtFp8Block - 1) / kLtFp8Block;
}

// "" when cuBLASLt's block-scaled FP8 GEMM can take K = `k`, N = `n` (on compute capability 9.x
// with cuBLASLt 12.9+: lt_fp8_device_reason), else why not: K must be a multiple of 128 (partial
// 128-element scale blocks are not documented) and N a multiple of 16 (16-byte rows).
std::string lt_fp8_shape_reason(int64_t k, int64_t n);
// "" when cuBLASLt and the GPU `device` run it (cuBLASLt 12.9+, compute capability 9.x).
std::string lt_fp8_device_reason(int device);
// "" when a weight with scale groups `group` expands to VEC128 scales (constant over every
// 128-wide K block: whole rows, or groups of a multiple of 128 columns).
std::string lt_fp8_weight_group_reason(GroupShape group);

// One FP8 GEMM shape. In cuBLASLt's column-major terms w is A (k x n, used transposed), x is B
// (k x rows), y is D (n x rows): the "TN" layout its FP8 kernels take. The scale pointers change
// per call (per expert), so a call sets them under the object's mutex; thread-safe.
class LtFp8Gemm {
 public:
  LtFp8Gemm(int64_t k, int64_t n, DType out_dtype, int device);
  ~LtFp8Gemm();
  LtFp8Gemm(const LtFp8Gemm&) = delete;
  LtFp8Gemm& operator=(const LtFp8Gemm&) = delete;

  // Queues the GEMM on `stream`; `workspace` holds kLtFp8WorkspaceBytes. MG_CHECK-fails naming
  // the size when cuBLASLt has no algorithm for it.
  void run(const uint8_t* x, const float* x_scales, int64_t rows, const uint8_t* w,
           const float* w_scales, void* y, void* workspace, cudaStream_t stream,
           float alpha = 1.0f);

 private:
  struct Plan {
    cublasLtMatrixLayout_t x = nullptr;
    cublasLtMatrixLayout_t y = nullptr;
    cublasLtMatmulAlgo_t algo{};
    size_t workspace = 0;
  };
  const Plan& plan_for(int64_t rows);  // under mutex_, scale pointers set

  int64_t k_, n_;
  int device_;
  cudaDataType_t out_type_;
  cublasLtMatmulDesc_t desc_ = nullptr;
  cublasLtMatrixLayout_t w_layout_ = nullptr;
  std::map<int64_t, Plan> plans_;
  std::mutex mutex_;
};

// A weight's scales as VEC128 scales: [E, ceil(K / 128), N] F32 on the host, the scale of weight
// row n and K block kb at (e * blocks + kb) * N + n, from the checkpoint's groups (128 x 128
// blocks, per channel, per tensor or per projection: all constant over a 128-wide K block, which
// lt_fp8_weight_group_reason ensures). `scale` may be on the host or the device.
Tensor lt_fp8_vec128_weight_scales(const Tensor& scale, const WeightQuantization& q,
                                   int64_t experts, int64_t n, int64_t k);

}  // namespace mg::cuda
