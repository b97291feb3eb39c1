#include "ops/nn/linear/fp8_gemm_cublaslt_cuda.h"

#include "framework/device/allocator.h"
#include "framework/device/convert.h"
#include "framework/device/cuda/cuda_check.h"
#include "framework/device/cuda/cuda_device.h"

namespace mg::cuda {

namespace {

// Pointers handed to cuBLASLt are at least this aligned (workspace pieces are 64-byte aligned;
// rows of codes are multiples of 16 bytes, rows of outputs of 32): its heuristic is told so.
constexpr uint32_t kMinAlignment = 16;

template <typename V>
void set_desc(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const V& value) {
  MG_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, attr, &value, sizeof(value)));
}

}  // namespace

std::string lt_fp8_shape_reason(int64_t k, int64_t n) {
  if (k % kLtFp8Block != 0) {
    return fmt::format(
        "K {} is not a multiple of 128: cuBLASLt's 128-element block scales are not documented "
        "for a partial last block",
        k);
  }
  if (n % 16 != 0) {
    return fmt::format("N {} is not a multiple of 16 (cuBLASLt's FP8 GEMMs need 16-byte rows)", n);
  }
  return {};
}

std::string lt_fp8_device_reason(int device) {
  if (cublasLtGetVersion() < 120900) {
    return fmt::format("needs cuBLASLt 12.9 or later for FP8 block scales, not {}",
                       cublasLtGetVersion());
  }
  int major = 0;
  MG_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  if (major != 9) {
    return fmt::format(
        "cuBLASLt's FP8 GEMMs with 128-element block scales run on compute capability 9.x "
        "(Hopper), not {}.x",
        major);
  }
  return {};
}

std::string lt_fp8_weight_group_reason(GroupShape group) {
  if (group.cols != -1 && group.cols % kLtFp8Block != 0) {
    return fmt::format(
        "weight scales per {} columns: cuBLASLt's block scales are per 128 columns (scale groups "
        "of a multiple of 128 columns, or whole rows)",
        group.cols);
  }
  return {};
}

LtFp8Gemm::LtFp8Gemm(int64_t k, int64_t n, DType out_dtype, int device)
    : k_(k),
      n_(n),
      device_(device),
      out_type_(out_dtype == DType::kF16 ? CUDA_R_16F : CUDA_R_16BF) {
  MG_ASSERT(out_dtype == DType::kF16 || out_dtype == DType::kBF16,
            "LtFp8Gemm: output dtype {} is not BF16 or F16", dtype_name(out_dtype));
  MG_CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc_, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  set_desc(desc_, CUBLASLT_MATMUL_DESC_TRANSA, cublasOperation_t{CUBLAS_OP_T});
  set_desc(desc_, CUBLASLT_MATMUL_DESC_TRANSB, cublasOperation_t{CUBLAS_OP_N});
  const int32_t mode = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
  set_desc(desc_, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, mode);
  set_desc(desc_, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, mode);
  MG_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&w_layout_, CUDA_R_8F_E4M3, static_cast<uint64_t>(k),
                                             static_cast<uint64_t>(n), k));
}

LtFp8Gemm::~LtFp8Gemm() {
  for (auto& [rows, plan] : plans_) {
    cublasLtMatrixLayoutDestroy(plan.x);
    cublasLtMatrixLayoutDestroy(plan.y);
  }
  if (w_layout_) cublasLtMatrixLayoutDestroy(w_layout_);
  if (desc_) cublasLtMatmulDescDestroy(desc_);
}

void LtFp8Gemm::run(const uint8_t* x, const float* x_scales, int64_t rows, const uint8_t* w,
                    const float* w_scales, void* y, void* workspace, cudaStream_t stream,
                    float alpha) {
  std::lock_guard<std::mutex> lock(mutex_);
  set_desc(desc_, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, static_cast<const void*>(w_scales));
  set_desc(desc_, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, static_cast<const void*>(x_scales));
  const Plan& plan = plan_for(rows);
  const float beta = 0.0f;
  const cublasStatus_t st =
      cublasLtMatmul(cublaslt_handle(device_), desc_, &alpha, w, w_layout_, x, plan.x, &beta, y,
                     plan.y, y, plan.y, &plan.algo, workspace, plan.workspace, stream);
  MG_CHECK(st == CUBLAS_STATUS_SUCCESS,
           "cublasLtMatmul (FP8, VEC128 scales, {} x {} x {}) failed: {}", rows, n_, k_,
           cublasGetStatusString(st));
}

const LtFp8Gemm::Plan& LtFp8Gemm::plan_for(int64_t rows) {
  auto it = plans_.find(rows);
  if (it != plans_.end()) return it->second;
  Plan plan;
  MG_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.x, CUDA_R_8F_E4M3, static_cast<uint64_t>(k_),
                                             static_cast<uint64_t>(rows), k_));
  MG_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.y, out_type_, static_cast<uint64_t>(n_),
                                             static_cast<uint64_t>(rows), n_));
  cublasLtMatmulPreference_t pref = nullptr;
  MG_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t max_workspace = kLtFp8WorkspaceBytes;
  MG_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &max_workspace, sizeof(max_workspace)));
  for (auto attr :
       {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES}) {
    MG_CUBLAS_CHECK(
        cublasLtMatmulPreferenceSetAttribute(pref, attr, &kMinAlignment, sizeof(kMinAlignment)));
  }
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(
      cublaslt_handle(device_), desc_, w_layout_, plan.x, plan.y, plan.y, pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (st != CUBLAS_STATUS_SUCCESS || found == 0) {
    cublasLtMatrixLayoutDestroy(plan.x);
    cublasLtMatrixLayoutDestroy(plan.y);
    MG_FAIL(
        "cuBLASLt has no FP8 GEMM with 128-element block scales for {} rows x N {} x K {} on "
        "this GPU ({})",
        rows, n_, k_, st == CUBLAS_STATUS_SUCCESS ? "no algorithm" : cublasGetStatusString(st));
  }
  plan.algo = result.algo;
  plan.workspace = result.workspaceSize;
  return plans_.emplace(rows, plan).first->second;
}

Tensor lt_fp8_vec128_weight_scales(const Tensor& scale, const WeightQuantization& q,
                                   int64_t experts, int64_t n, int64_t k) {
  Tensor host = scale;
  if (!scale.device().is_cpu()) {
    // Scales made on the GPU (the MoE benchmark's) may still be in flight on another stream.
    MG_CUDA_CHECK(cudaDeviceSynchronize());
    host = Tensor::empty_cpu(scale.dtype(), scale.shape());
    copy_tensor(host, scale);
  }
  const Tensor s = to_f32_cpu(host);
  const int64_t bn = q.group.rows_in(n), bk = q.group.cols_in(k);
  const int64_t s_rows = (n + bn - 1) / bn, s_cols = (k + bk - 1) / bk;
  const int64_t blocks = lt_fp8_k_blocks(k);
  MG_CHECK(s.numel() == experts * s_rows * s_cols,
           "FP8 cuBLASLt: {} weight scales, expected {} x {} x {}", s.numel(), experts, s_rows,
           s_cols);
  Tensor out = Tensor::empty_cpu(DType::kF32, {experts, blocks, n});
  const float* src = s.data<float>();
  float* dst = out.data<float>();
  for (int64_t e = 0; e < experts; ++e) {
    for (int64_t kb = 0; kb < blocks; ++kb) {
      for (int64_t r = 0; r < n; ++r) {
        dst[(e * blocks + kb) * n + r] =
            src[(e * s_rows + r / bn) * s_cols + kb * kLtFp8Block / bk];
      }
    }
  }
  return out;
}

}  // namespace mg::cuda
