#include "ops/nn/linear/linear_gemm_cuda.h"

#include <algorithm>
#include <type_traits>

#include "framework/device/cuda/cuda_check.h"
#include "framework/device/cuda/cuda_device.h"
#include "framework/device/cuda/dtype_dispatch.h"
#include "ops/nn/linear/linear_cuda.h"
#include "ops/nn/linear/linear_gemv_cuda.h"

namespace mg::cuda {

namespace {

// The GEMMs in column-major terms (cuBLAS's): with x, w, y row-major,
//   w [out, in] row-major = A (in × out, lda = in), used transposed: op(A) = out × in
//   x [tokens, in]        = B (in × tokens, ldb = in)
//   y [tokens, out]       = D (out × tokens, ldd = out) = alpha · op(A) · B (+ bias per row of D)

// Every pointer is at least 16-byte aligned (arena offsets 64, allocator blocks 256); telling
// cuBLASLt so lets its heuristic consider kernels that need it.
constexpr uint32_t kMinAlignment = 16;

cudaDataType_t cuda_data_type(DType dtype) {
  if (dtype == DType::kF32) return CUDA_R_32F;
  if (dtype == DType::kF16) return CUDA_R_16F;
  MG_ASSERT(dtype == DType::kBF16, "GemmXwt: dtype {} is not F32, F16 or BF16", dtype_name(dtype));
  return CUDA_R_16BF;
}

template <typename V>
void set_desc(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const V& value) {
  MG_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, attr, &value, sizeof(value)));
}

std::mutex& cublas_mutex() {
  static std::mutex mutex;
  return mutex;
}

}  // namespace

GemmXwt::GemmXwt(DType dtype, int64_t in, int64_t out, const void* bias, int device,
                 std::optional<DType> out_dtype)
    : dtype_(dtype),
      out_dtype_(out_dtype.value_or(dtype)),
      in_(in),
      out_(out),
      bias_(bias),
      device_(device),
      gemv_max_rows_(0),
      data_type_(cuda_data_type(dtype)),
      out_type_(cuda_data_type(out_dtype_)) {
  MG_CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc_, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  set_desc(desc_, CUBLASLT_MATMUL_DESC_TRANSA, cublasOperation_t{CUBLAS_OP_T});
  set_desc(desc_, CUBLASLT_MATMUL_DESC_TRANSB, cublasOperation_t{CUBLAS_OP_N});
  if (bias_ != nullptr) {
    set_desc(desc_, CUBLASLT_MATMUL_DESC_EPILOGUE, cublasLtEpilogue_t{CUBLASLT_EPILOGUE_BIAS});
    set_desc(desc_, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias_);
    set_desc(desc_, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, static_cast<int32_t>(out_type_));
  }
  MG_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&w_layout_, data_type_, static_cast<uint64_t>(in),
                                             static_cast<uint64_t>(out), in));
  // The measured rule (linear_gemv_cuda.h, gemv_chosen_rows): the GEMV for a few rows of aligned
  // weights; unaligned rows load element by element and lose to cuBLAS even at one row.
  if (gemv_supported() && rows_aligned()) gemv_max_rows_ = gemv_chosen_rows(out);
}

GemmXwt::~GemmXwt() {
  for (auto& [tokens, plan] : plans_) {
    cublasLtMatrixLayoutDestroy(plan.x);
    cublasLtMatrixLayoutDestroy(plan.y);
  }
  if (w_layout_) cublasLtMatrixLayoutDestroy(w_layout_);
  if (desc_) cublasLtMatmulDescDestroy(desc_);
}

const GemmXwt::TokensPlan& GemmXwt::plan_for(int64_t tokens) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = plans_.find(tokens);
  if (it != plans_.end()) return it->second;
  TokensPlan& plan = plans_[tokens];
  MG_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.x, data_type_, static_cast<uint64_t>(in_),
                                             static_cast<uint64_t>(tokens), in_));
  MG_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.y, out_type_, static_cast<uint64_t>(out_),
                                             static_cast<uint64_t>(tokens), out_));
  // cuBLASLt has had trouble with single-row or single-column weights; cublasGemmEx serves them.
  if (in_ < 2 || out_ < 2) return plan;
  // Rows that are not 16-byte multiples (an odd hidden size in BF16): cuBLASLt's heuristic is told
  // every operand is 16-byte aligned, which only the row starts of aligned rows are, so such
  // GEMMs go to cublasGemmEx, which takes any leading dimension.
  if (!rows_aligned()) return plan;

  cublasLtMatmulPreference_t pref = nullptr;
  MG_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t max_workspace = kWorkspaceBytes;
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
  if (st == CUBLAS_STATUS_SUCCESS && found > 0) {
    plan.algo = result.algo;
    plan.workspace = result.workspaceSize;
    plan.has_algo = true;
  } else if (st != CUBLAS_STATUS_NOT_SUPPORTED) {
    MG_CUBLAS_CHECK(st);
  }
  return plan;
}

void GemmXwt::run(const void* x, int64_t tokens, const void* w, void* y, float alpha,
                  void* workspace, size_t workspace_bytes, cudaStream_t stream) const {
  if (tokens <= 0) return;
  if (tokens <= gemv_max_rows_ && tokens <= kGemvMaxRows && gemv_supported()) {
    GemvArgs args;
    args.x = x;
    args.w = w;
    args.bias = bias_;
    args.y = y;
    args.rows = tokens;
    args.in = in_;
    args.out = out_;
    args.alpha = alpha;
    dispatch_float_dtype(dtype_, [&](auto tag) {
      using T = decltype(tag);
      if (out_dtype_ == dtype_) {
        launch_gemv<T, T>(args, stream);
      } else {
        if constexpr (!std::is_same_v<T, float>) launch_gemv<T, float>(args, stream);
      }
    });
    return;
  }
  const auto aligned = [](const void* p) {
    return reinterpret_cast<uintptr_t>(p) % kMinAlignment == 0;
  };
  const TokensPlan& plan = plan_for(tokens);
  bool has_algo;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    has_algo = plan.has_algo;
  }
  // cuBLASLt's plan assumes 16-byte aligned operands; a view that starts elsewhere takes the
  // cublasGemmEx path.
  has_algo = has_algo && aligned(x) && aligned(w) && aligned(y);
  if (has_algo) {
    MG_ASSERT(workspace_bytes >= plan.workspace, "GemmXwt: workspace of {} bytes, need {}",
              workspace_bytes, plan.workspace);
    const float beta = 0.0f;
    const cublasStatus_t st =
        cublasLtMatmul(cublaslt_handle(device_), desc_, &alpha, w, w_layout_, x, plan.x, &beta, y,
                       plan.y, y, plan.y, &plan.algo, workspace, plan.workspace, stream);
    if (st == CUBLAS_STATUS_SUCCESS) return;
    MG_ASSERT(st == CUBLAS_STATUS_NOT_SUPPORTED, "cublasLtMatmul failed: {}",
              cublasGetStatusString(st));
    // The heuristic's choice does not run on these operands after all: use cublasGemmEx.
    std::lock_guard<std::mutex> lock(mutex_);
    plans_[tokens].has_algo = false;
  }
  run_gemm_ex(x, tokens, w, y, alpha, stream);
}

void GemmXwt::run_gemm_ex(const void* x, int64_t tokens, const void* w, void* y, float alpha,
                          cudaStream_t stream) const {
  {
    // The cuBLAS handle is shared per device; its stream is per call.
    std::lock_guard<std::mutex> lock(cublas_mutex());
    cublasHandle_t handle = cublas_handle(device_);
    MG_CUBLAS_CHECK(cublasSetStream(handle, stream));
    const float beta = 0.0f;
    MG_CUBLAS_CHECK(cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(out_),
                                 static_cast<int>(tokens), static_cast<int>(in_), &alpha, w,
                                 data_type_, static_cast<int>(in_), x, data_type_,
                                 static_cast<int>(in_), &beta, y, out_type_, static_cast<int>(out_),
                                 CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }
  if (bias_ != nullptr) {
    dispatch_float_dtype(out_dtype_, [&](auto tag) {
      launch_add_bias<decltype(tag)>(y, bias_, tokens, out_, stream);
    });
  }
}

int64_t GemmXwt::gemv_rows() const {
  return gemv_supported() ? std::clamp<int64_t>(gemv_max_rows_, 0, kGemvMaxRows) : 0;
}

bool GemmXwt::gemv_supported() const {
  // Same dtype in and out, or 16-bit in and F32 out (the router's logits).
  return out_dtype_ == dtype_ || (out_dtype_ == DType::kF32 && dtype_ != DType::kF32);
}

bool GemmXwt::rows_aligned() const {
  return (in_ * static_cast<int64_t>(dtype_size(dtype_))) % kMinAlignment == 0 &&
         (out_ * static_cast<int64_t>(dtype_size(out_dtype_))) % kMinAlignment == 0;
}

std::string GemmXwt::describe() const {
  const char* api = rows_aligned() ? "cublasLt" : "cublasGemmEx (rows not 16-byte aligned)";
  const std::string types =
      out_dtype_ == dtype_ ? std::string(dtype_name(dtype_))
                           : fmt::format("{} -> {}", dtype_name(dtype_), dtype_name(out_dtype_));
  if (!gemv_supported() || gemv_max_rows_ <= 0) return fmt::format("{} {}", api, types);
  return fmt::format("{} {}, gemv up to {} rows", api, types,
                     std::min(gemv_max_rows_, kGemvMaxRows));
}

int gemv_warps_per_feature(int64_t in, int64_t out, int element_bytes, int64_t target_warps) {
  const int64_t target = target_warps > 0     ? target_warps
                         : in >= kGemvLongRow ? kGemvLongRowTargetWarps
                                              : kGemvTargetWarps;
  const int64_t chunks = std::max<int64_t>(1, in * element_bytes / 16);
  int wpf = 1;
  // With 16-byte rows, doubling keeps at least 64 chunks a warp (two 16-byte loads a lane): a
  // lane with one load leaves its loads in flight unused (bench gemv on the H100, 1 row: the q/k/v
  // split with its k/v blocks at 8 warps a feature, one load a lane, 10.55 us, at 4 warps 9.27;
  // k/v 2048 -> 512 alone 2.42 -> 2.18). Scalar rows (odd `in`) keep 32 a warp: their lanes walk
  // elements one by one, and fewer warps made 2047 -> 1001 take 15.15 us against 8.67.
  const int64_t min_chunks = (in * element_bytes) % 16 == 0 ? 64 : 32;
  while (wpf < 8 && out * wpf < target && chunks >= 2 * min_chunks * wpf) wpf *= 2;
  return wpf;
}

}  // namespace mg::cuda
