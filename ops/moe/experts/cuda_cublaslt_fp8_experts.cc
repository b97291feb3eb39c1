#include "ops/moe/experts/cuda_cublaslt_fp8_experts.h"

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <map>
#include <memory>
#include <mutex>

#include "framework/device/allocator.h"
#include "framework/device/convert.h"
#include "framework/device/cuda/cuda_check.h"
#include "framework/device/cuda/cuda_device.h"
#include "ops/moe/cuda/fp8/fp8_cublaslt_prep_cuda.h"
#include "ops/moe/cuda/fp8/fp8_experts_cuda.h"
#include "ops/moe/cuda/moe_align_cuda.h"
#include "ops/moe/cuda/moe_routing_cuda.h"
#include "ops/moe/experts/cuda_expert_common.h"
#include "ops/moe/experts/cuda_experts.h"
#include "ops/moe/router/router_cuda.h"

namespace mg {

namespace {

constexpr int64_t kBlock = 128;  // cuBLASLt's VEC128 block along K
// Pointers handed to cuBLASLt are at least this aligned (workspace pieces are 64-byte aligned;
// rows of codes are multiples of 16 bytes, rows of outputs of 32): its heuristic is told so.
constexpr uint32_t kMinAlignment = 16;
constexpr size_t kBlasWorkspace = size_t{32} << 20;

int64_t k_blocks(int64_t k) {
  return (k + kBlock - 1) / kBlock;
}

template <typename V>
void set_desc(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const V& value) {
  MG_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, attr, &value, sizeof(value)));
}

// One FP8 GEMM shape of every expert: y [rows, n] (T) = x [rows, k] (e4m3, VEC128 scales) .
// w [n, k]^T (e4m3, VEC128 scales). In cuBLASLt's column-major terms w is A (k x n, used
// transposed), x is B (k x rows), y is D (n x rows): the "TN" layout its FP8 kernels take. The
// scale pointers change per expert and call, so a call sets them under the object's mutex.
class LtFp8Gemm {
 public:
  LtFp8Gemm(int64_t k, int64_t n, DType out_dtype, int device)
      : k_(k),
        n_(n),
        device_(device),
        out_type_(out_dtype == DType::kF16 ? CUDA_R_16F : CUDA_R_16BF) {
    MG_CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc_, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    set_desc(desc_, CUBLASLT_MATMUL_DESC_TRANSA, cublasOperation_t{CUBLAS_OP_T});
    set_desc(desc_, CUBLASLT_MATMUL_DESC_TRANSB, cublasOperation_t{CUBLAS_OP_N});
    const int32_t mode = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
    set_desc(desc_, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, mode);
    set_desc(desc_, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, mode);
    MG_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&w_layout_, CUDA_R_8F_E4M3, static_cast<uint64_t>(k),
                                               static_cast<uint64_t>(n), k));
  }
  ~LtFp8Gemm() {
    for (auto& [rows, plan] : plans_) {
      cublasLtMatrixLayoutDestroy(plan.x);
      cublasLtMatrixLayoutDestroy(plan.y);
    }
    if (w_layout_) cublasLtMatrixLayoutDestroy(w_layout_);
    if (desc_) cublasLtMatmulDescDestroy(desc_);
  }
  LtFp8Gemm(const LtFp8Gemm&) = delete;
  LtFp8Gemm& operator=(const LtFp8Gemm&) = delete;

  void run(const uint8_t* x, const float* x_scales, int64_t rows, const uint8_t* w,
           const float* w_scales, void* y, void* workspace, cudaStream_t stream) {
    std::lock_guard<std::mutex> lock(mutex_);
    set_desc(desc_, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, static_cast<const void*>(w_scales));
    set_desc(desc_, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, static_cast<const void*>(x_scales));
    const Plan& plan = plan_for(rows);
    const float alpha = 1.0f, beta = 0.0f;
    const cublasStatus_t st =
        cublasLtMatmul(cuda::cublaslt_handle(device_), desc_, &alpha, w, w_layout_, x, plan.x,
                       &beta, y, plan.y, y, plan.y, &plan.algo, workspace, plan.workspace, stream);
    MG_CHECK(st == CUBLAS_STATUS_SUCCESS,
             "cuda_cublaslt_fp8: cublasLtMatmul (FP8, VEC128 scales, {} x {} x {}) failed: {}",
             rows, n_, k_, cublasGetStatusString(st));
  }

 private:
  struct Plan {
    cublasLtMatrixLayout_t x = nullptr;
    cublasLtMatrixLayout_t y = nullptr;
    cublasLtMatmulAlgo_t algo{};
    size_t workspace = 0;
  };

  // Layouts and the heuristic's algorithm per row count (called under mutex_, scale pointers set).
  const Plan& plan_for(int64_t rows) {
    auto it = plans_.find(rows);
    if (it != plans_.end()) return it->second;
    Plan plan;
    MG_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.x, CUDA_R_8F_E4M3, static_cast<uint64_t>(k_),
                                               static_cast<uint64_t>(rows), k_));
    MG_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.y, out_type_, static_cast<uint64_t>(n_),
                                               static_cast<uint64_t>(rows), n_));
    cublasLtMatmulPreference_t pref = nullptr;
    MG_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    const uint64_t max_workspace = kBlasWorkspace;
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
    const cublasStatus_t st =
        cublasLtMatmulAlgoGetHeuristic(cuda::cublaslt_handle(device_), desc_, w_layout_, plan.x,
                                       plan.y, plan.y, pref, 1, &result, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    if (st != CUBLAS_STATUS_SUCCESS || found == 0) {
      cublasLtMatrixLayoutDestroy(plan.x);
      cublasLtMatrixLayoutDestroy(plan.y);
      MG_FAIL(
          "cuda_cublaslt_fp8: cuBLASLt has no FP8 GEMM with 128-element block scales for {} rows x "
          "N {} x K {} on this GPU ({}); use cuda_fp8",
          rows, n_, k_, st == CUBLAS_STATUS_SUCCESS ? "no algorithm" : cublasGetStatusString(st));
    }
    plan.algo = result.algo;
    plan.workspace = result.workspaceSize;
    return plans_.emplace(rows, plan).first->second;
  }

  int64_t k_, n_;
  int device_;
  cudaDataType_t out_type_;
  cublasLtMatmulDesc_t desc_ = nullptr;
  cublasLtMatrixLayout_t w_layout_ = nullptr;
  std::map<int64_t, Plan> plans_;
  std::mutex mutex_;
};

// A weight's scales as VEC128 scales for cuBLASLt: [E, ceil(K / 128), N] F32 on the host, the
// scale of weight row n and K block kb at (e * blocks + kb) * N + n, from the checkpoint's groups
// (128 x 128 blocks, per channel, per tensor or per projection: all constant over a 128-wide K
// block, which check_quant ensures).
Tensor vec128_weight_scales(const Tensor& scale, const WeightQuantization& q, int64_t experts,
                            int64_t n, int64_t k) {
  Tensor host = scale;
  if (!scale.device().is_cpu()) {
    // Scales made on the GPU (the MoE benchmark's) may still be in flight on another stream.
    MG_CUDA_CHECK(cudaDeviceSynchronize());
    host = Tensor::empty_cpu(scale.dtype(), scale.shape());
    copy_tensor(host, scale);
  }
  const Tensor s = to_f32_cpu(host);
  const int64_t bn = q.group.rows_in(n), bk = q.group.cols_in(k);
  const int64_t s_rows = (n + bn - 1) / bn, s_cols = (k + bk - 1) / bk, blocks = k_blocks(k);
  MG_CHECK(s.numel() == experts * s_rows * s_cols,
           "cuda_cublaslt_fp8: {} weight scales, expected {} x {} x {}", s.numel(), experts, s_rows,
           s_cols);
  Tensor out = Tensor::empty_cpu(DType::kF32, {experts, blocks, n});
  const float* src = s.data<float>();
  float* dst = out.data<float>();
  for (int64_t e = 0; e < experts; ++e) {
    for (int64_t kb = 0; kb < blocks; ++kb) {
      for (int64_t r = 0; r < n; ++r) {
        dst[(e * blocks + kb) * n + r] = src[(e * s_rows + r / bn) * s_cols + kb * kBlock / bk];
      }
    }
  }
  return out;
}

Tensor upload(const Tensor& host, Device device) {
  if (!host.defined()) return {};
  if (host.device() == device) return host;
  Tensor out = empty_tensor(device, host.dtype(), host.shape());
  copy_tensor(out, host);
  return out;
}

class CudaCublasLtFp8Experts final : public ExpertsMonolithic {
 public:
  CudaCublasLtFp8Experts(const ExpertsBackend& backend, const ExpertsBuild& b)
      : ExpertsMonolithic(backend),
        shape_(b.shape),
        per_token_(b.quant.activation_key().group().cols == -1),
        route_(route_params(b.config.routing())),
        w13_(upload(b.quantized.w13, b.device)),
        w2_(upload(b.quantized.w2, b.device)),
        b13_(upload(b.quantized.w13_bias, b.device)),
        b2_(upload(b.quantized.w2_bias, b.device)),
        gemm1_(b.shape.hidden_size, b.shape.w13_rows(), b.shape.dtype, b.device.index),
        gemm2_(b.shape.intermediate_size, b.shape.hidden_size, b.shape.dtype, b.device.index) {
    const int64_t E = shape_.num_local_experts(), H = shape_.hidden_size;
    const int64_t I = shape_.intermediate_size, N1 = shape_.w13_rows();
    s13_ =
        upload(vec128_weight_scales(b.quantized.w13_quant.scale, b.quantized.w13_quant, E, N1, H),
               b.device);
    s2_ = upload(vec128_weight_scales(b.quantized.w2_quant.scale, b.quantized.w2_quant, E, H, I),
                 b.device);
    const std::vector<int32_t>& g2l = shape_.expert_map.global_to_local;
    Tensor map = Tensor::empty_cpu(DType::kI32, {static_cast<int64_t>(g2l.size())});
    std::copy(g2l.begin(), g2l.end(), map.data<int32_t>());
    expert_map_ = upload(map, b.device);
    if (b.config.routing().has_score_correction_bias) {
      bias_ = upload(to_f32_cpu(b.score_correction_bias), b.device);
    }
    MG_CUDA_CHECK(
        cudaMallocHost(reinterpret_cast<void**>(&host_offsets_), (E + 1) * sizeof(int32_t)));
  }
  ~CudaCublasLtFp8Experts() override { cudaFreeHost(host_offsets_); }

  bool graph_capturable() const override { return false; }  // reads the expert offsets back

  size_t workspace_bytes(int64_t max_rows) const override {
    Workspace ws = Workspace::sizing();
    Scratch(ws, shape_, max_rows);
    return ws.bytes();
  }

  void apply(const DispatchedLogits& t, Workspace& ws, const MoEExecContext& ctx) override {
    const int64_t M = t.num_tokens, k = shape_.top_k, H = shape_.hidden_size;
    const int64_t I = shape_.intermediate_size, E = shape_.num_local_experts();
    const int64_t N1 = shape_.w13_rows(), P = M * k;
    const Scratch sc(ws, shape_, M);
    if (M == 0) return;
    const cudaStream_t s = cuda::native(ctx.stream);
    cuda::launch_moe_route<float>(route_, t.router_logits, M,
                                  bias_.defined() ? bias_.data<float>() : nullptr, sc.ids,
                                  sc.weights, s);
    cuda::launch_moe_align(sc.ids, P, expert_map_.data<int32_t>(), shape_.num_experts, E, sc.align,
                           s);
    const int32_t* offsets = sc.align.expert_offsets;
    const cuda::MoEActParams act = cuda_act_params(shape_.activation);
    const bool gated = is_gated(shape_.activation.kind);
    const int64_t es = static_cast<int64_t>(dtype_size(shape_.dtype));
    auto quantize = [&](auto tag, const void* x, const int32_t* row_to_pair, int64_t width,
                        uint8_t* q, float* scales, float* vec128) {
      using T = decltype(tag);
      cuda::Fp8QuantArgs a;
      a.x = x;
      a.row_to_pair = row_to_pair;
      a.top_k = k;
      a.num_rows = offsets + E;
      a.max_rows = P;
      a.k = width;
      a.per_token = per_token_;
      a.xq = q;
      a.xs = scales;
      cuda::launch_fp8_quantize<T>(a, s);
      cuda::launch_fp8_vec128_scales(scales, cuda::fp8_act_scale_cols(width, per_token_), offsets,
                                     E, P, k_blocks(width), vec128, s);
    };
    dispatch_16bit(shape_.dtype, [&](auto tag) {
      quantize(tag, t.hidden, sc.align.row_to_pair, H, sc.xq, sc.xs, sc.xs_vec);
    });
    // The per-expert GEMM sizes are host arguments: read the offsets back (the one sync).
    MG_CUDA_CHECK(cudaMemcpyAsync(host_offsets_, offsets, (E + 1) * sizeof(int32_t),
                                  cudaMemcpyDeviceToHost, s));
    MG_CUDA_CHECK(cudaStreamSynchronize(s));
    const uint8_t* w13 = fp8_codes(w13_);
    const uint8_t* w2 = fp8_codes(w2_);
    for (int64_t e = 0; e < E; ++e) {
      const int64_t begin = host_offsets_[e], rows = host_offsets_[e + 1] - begin;
      if (rows == 0) continue;
      gemm1_.run(
          sc.xq + begin * H, sc.xs_vec + cuda::fp8_vec128_scale_offset(k_blocks(H), begin, e),
          cuda::fp8_lt_rows(rows), w13 + e * N1 * H, s13_.data<float>() + e * k_blocks(H) * N1,
          static_cast<std::byte*>(sc.h1) + begin * N1 * es, sc.blas, s);
    }
    dispatch_16bit(shape_.dtype, [&](auto tag) {
      using T = decltype(tag);
      cuda::launch_fp8_rows_bias_act<T>(sc.h1, N1, sc.h, I, offsets, E, P,
                                        b13_.defined() ? b13_.data<float>() : nullptr, true, gated,
                                        act, s);
      quantize(tag, sc.h, nullptr, I, sc.hq, sc.hs, sc.hs_vec);
    });
    for (int64_t e = 0; e < E; ++e) {
      const int64_t begin = host_offsets_[e], rows = host_offsets_[e + 1] - begin;
      if (rows == 0) continue;
      gemm2_.run(sc.hq + begin * I,
                 sc.hs_vec + cuda::fp8_vec128_scale_offset(k_blocks(I), begin, e),
                 cuda::fp8_lt_rows(rows), w2 + e * H * I, s2_.data<float>() + e * k_blocks(I) * H,
                 static_cast<std::byte*>(sc.y_perm) + begin * H * es, sc.blas, s);
    }
    dispatch_16bit(shape_.dtype, [&](auto tag) {
      using T = decltype(tag);
      if (b2_.defined()) {
        cuda::launch_fp8_rows_bias_act<T>(sc.y_perm, H, sc.y_perm, H, offsets, E, P,
                                          b2_.data<float>(), false, false, act, s);
      }
      cuda::launch_moe_combine<T>(sc.y_perm, sc.align, sc.ids, sc.weights,
                                  expert_map_.data<int32_t>(), nullptr, M, k, H, t.expert_output,
                                  s);
    });
  }

 private:
  template <typename Fn>
  static void dispatch_16bit(DType dtype, Fn&& fn) {
    MG_ASSERT(dtype == DType::kBF16 || dtype == DType::kF16,
              "cuda_cublaslt_fp8 built for activation dtype {}", dtype_name(dtype));
    if (dtype == DType::kBF16) {
      fn(__nv_bfloat16{});
    } else {
      fn(__half{});
    }
  }

  // The sizing pass and a call walk the same code.
  struct Scratch {
    int32_t* ids;
    float* weights;
    cuda::MoEAlignment align;
    uint8_t* xq;
    float* xs;
    float* xs_vec;
    void* h1;
    void* h;
    uint8_t* hq;
    float* hs;
    float* hs_vec;
    void* y_perm;
    void* blas;

    Scratch(Workspace& ws, const ExpertsShape& shape, int64_t M) {
      const int64_t k = shape.top_k, P = M * k, E = shape.num_local_experts();
      const int64_t H = shape.hidden_size, I = shape.intermediate_size;
      const int64_t es = static_cast<int64_t>(dtype_size(shape.dtype));
      ids = ws.take<int32_t>(P);
      weights = ws.take<float>(P);
      align.expert_counts = ws.take<int32_t>(E);
      align.expert_offsets = ws.take<int32_t>(E + 1);
      align.pair_to_row = ws.take<int32_t>(P);
      align.row_to_pair = ws.take<int32_t>(P);
      xq = ws.take<uint8_t>((P + cuda::kFp8LtRowSlack) * H);
      xs = ws.take<float>(P * k_blocks(H));
      xs_vec = ws.take<float>(cuda::fp8_vec128_scale_floats(k_blocks(H), P, E));
      h1 = ws.take<std::byte>((P + cuda::kFp8LtRowSlack) * shape.w13_rows() * es);
      h = ws.take<std::byte>(P * I * es);
      hq = ws.take<uint8_t>((P + cuda::kFp8LtRowSlack) * I);
      hs = ws.take<float>(P * k_blocks(I));
      hs_vec = ws.take<float>(cuda::fp8_vec128_scale_floats(k_blocks(I), P, E));
      y_perm = ws.take<std::byte>((P + cuda::kFp8LtRowSlack) * H * es);
      blas = ws.take<std::byte>(static_cast<int64_t>(kBlasWorkspace));
    }
  };

  ExpertsShape shape_;
  bool per_token_;
  cuda::RouteParams route_;
  Tensor w13_, w2_, b13_, b2_, s13_, s2_;
  Tensor expert_map_;
  Tensor bias_;
  LtFp8Gemm gemm1_, gemm2_;
  int32_t* host_offsets_ = nullptr;  // pinned [E_local + 1]
};

class CudaCublasLtFp8Backend final : public ExpertsBackend {
 public:
  std::string_view name() const override { return "cuda_cublaslt_fp8"; }
  bool is_monolithic() const override { return true; }
  ActivationFormat activation_format() const override { return ActivationFormat::kStandard; }
  std::string check_device(Device device) const override {
    std::string why = cuda_check_device(device);
    if (!why.empty()) return why;
    // FP8 GEMMs with 128-element block scales: cuBLASLt 12.9+ on compute capability 9.x.
    if (cublasLtGetVersion() < 120900) {
      return fmt::format("needs cuBLASLt 12.9 or later for FP8 block scales, not {}",
                         cublasLtGetVersion());
    }
    int major = 0;
    MG_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device.index));
    if (major != 9) {
      return fmt::format(
          "cuBLASLt's FP8 GEMMs with 128-element block scales run on compute capability 9.x "
          "(Hopper), not {}.x",
          major);
    }
    return {};
  }
  std::string check_quant(const MoEQuantConfig& quant) const override {
    if (!is_fp8_scheme(quant.scheme())) {
      return fmt::format("takes FP8 weights, not {}", quant_scheme_name(quant.scheme()));
    }
    const QuantKey& a = quant.activation_key();
    if (!a.quantized()) {
      return "quantizes activations (W8A8); W8A16 (" + a.str() +
             " activations) runs on cuda_dequant";
    }
    if (a.dtype() != DType::kF8E4M3 || a.is_static() ||
        !(a.group().cols == 128 || a.group().cols == -1)) {
      return "quantizes activations dynamically to F8_E4M3 per token or per 128 channels, not " +
             a.str();
    }
    const GroupShape g = quant.weight_key().group();
    if (g.cols != -1 && g.cols % kBlock != 0) {
      return fmt::format(
          "weight scales per {} columns: cuBLASLt's block scales are per 128 columns (scale "
          "groups of a multiple of 128 columns, or whole rows)",
          g.cols);
    }
    return {};
  }
  std::string check_activation(const ActivationConfig&) const override { return {}; }
  std::string check_routing(const RoutingConfig& routing) const override {
    if (routing.weight_on_input()) return "Llama-4's weight-on-input routing is not supported";
    return check_cuda_routing(routing);
  }
  std::string check_parallel(const ParallelConfig& parallel) const override {
    return cuda_check_parallel(parallel);
  }
  std::string check_shape(const ExpertsShape& shape) const override {
    if (shape.dtype != DType::kBF16 && shape.dtype != DType::kF16) {
      return fmt::format("takes BF16 or F16 activations, not {}", dtype_name(shape.dtype));
    }
    if (shape.num_local_experts() > cuda::kMaxAlignLocalExperts) {
      return fmt::format("at most {} local experts, not {}", cuda::kMaxAlignLocalExperts,
                         shape.num_local_experts());
    }
    for (const auto& [what, size] : {std::pair<const char*, int64_t>{"hidden", shape.hidden_size},
                                     {"intermediate", shape.intermediate_size}}) {
      if (size % kBlock != 0) {
        return fmt::format(
            "{} size {} is not a multiple of 128: cuBLASLt's 128-element block scales are not "
            "documented for a partial last block (cuda_fp8 takes it)",
            what, size);
      }
    }
    return {};
  }
  std::unique_ptr<Experts> create(ExpertsBuild build) const override {
    return std::make_unique<CudaCublasLtFp8Experts>(*this, build);
  }
};

}  // namespace

const ExpertsBackend& cuda_cublaslt_fp8_backend() {
  static const CudaCublasLtFp8Backend backend;
  return backend;
}

}  // namespace mg
