// The CUDA GEMM behind linear and gated_mlp (the GPU twin of linear_gemm.h):
//   y [tokens, out] = alpha · x [tokens, in] · w [out, in]ᵀ (+ bias [out])
// up to kGemvChosenRows tokens on 16-byte rows through the memory-bound GEMV kernel
// (linear_gemv_cuda.h: the bench's crossover); otherwise through cuBLASLt when rows are 16-byte
// multiples (in and out times the element size) and cublasGemmEx, which takes any leading
// dimension, when not; with fp32 accumulation (pure fp32 for F32 data: no TF32) and the bias added
// in the GEMM epilogue. x, w, y and bias share one dtype: F32, F16 or BF16.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>

#include "framework/core/dtype.h"

namespace mg::cuda {

class GemmXwt {
 public:
  // Workspace cuBLASLt may use per call (NVIDIA's recommendation for Hopper); callers reserve it
  // through OpKernel::workspace_bytes so no call allocates.
  static constexpr size_t kWorkspaceBytes = size_t{32} << 20;

  // `bias` [out] (device, may be null) stays fixed for the GEMM's life: linear's bias is a weight.
  // `out_dtype`: y's (and the bias's) element type when it differs from x and w (the MoE router
  // writes F32 logits from BF16 activations); F32, F16 or BF16.
  GemmXwt(DType dtype, int64_t in, int64_t out, const void* bias, int device,
          std::optional<DType> out_dtype = std::nullopt);
  ~GemmXwt();
  GemmXwt(const GemmXwt&) = delete;
  GemmXwt& operator=(const GemmXwt&) = delete;

  // Queues the GEMM on `stream`. Device pointers: 16-byte aligned ones take the cuBLASLt plan,
  // others cublasGemmEx; `workspace`
  // holds at least kWorkspaceBytes. Thread-safe (sessions may share a kernel).
  void run(const void* x, int64_t tokens, const void* w, void* y, float alpha, void* workspace,
           size_t workspace_bytes, cudaStream_t stream) const;

  // "cublasLt BF16, gemv up to 2 rows" for `inspect --plan`.
  std::string describe() const;

  // Rows up to which run() takes the GEMV kernel (default: kGemvChosenRows on 16-byte rows, else
  // 0; at most kGemvMaxRows). For the bench and the tests that force the GEMV at every row count;
  // not thread-safe with run().
  void set_gemv_max_rows(int64_t rows) { gemv_max_rows_ = rows; }
  // Rows up to which run() takes the GEMV kernel (0: never): a linear with several outputs
  // launches one split GEMV (linear_gemv_cuda.h) where each block's GemmXwt would take it.
  int64_t gemv_rows() const;

 private:
  // Per token count: the layouts of x and y and the algorithm cuBLASLt's heuristic chose
  // (has_algo false: no algorithm fits, the cublasGemmEx path runs instead).
  struct TokensPlan {
    cublasLtMatrixLayout_t x = nullptr;
    cublasLtMatrixLayout_t y = nullptr;
    cublasLtMatmulAlgo_t algo{};
    bool has_algo = false;
    size_t workspace = 0;
  };
  const TokensPlan& plan_for(int64_t tokens) const;
  // Rows of x, w and y are 16-byte multiples: the condition for the cuBLASLt path.
  bool rows_aligned() const;
  // The GEMV kernel serves this GEMM's dtypes (linear_gemv_cuda.h).
  bool gemv_supported() const;
  void run_gemm_ex(const void* x, int64_t tokens, const void* w, void* y, float alpha,
                   cudaStream_t stream) const;

  DType dtype_;
  DType out_dtype_;
  int64_t in_;
  int64_t out_;
  const void* bias_;
  int device_;
  int64_t gemv_max_rows_;
  cudaDataType_t data_type_;
  cudaDataType_t out_type_;
  cublasLtMatmulDesc_t desc_ = nullptr;
  cublasLtMatrixLayout_t w_layout_ = nullptr;
  mutable std::mutex mutex_;
  mutable std::map<int64_t, TokensPlan> plans_;  // a map: references stay valid as it grows
};

}  // namespace mg::cuda
