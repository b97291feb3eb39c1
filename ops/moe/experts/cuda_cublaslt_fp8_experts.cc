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
#include "framework/device/cuda/dtype_dispatch.h"
#include "ops/moe/cuda/fp8/fp8_cublaslt_prep_cuda.h"
#include "ops/moe/cuda/fp8/fp8_experts_cuda.h"
#include "ops/moe/cuda/moe_align_cuda.h"
#include "ops/moe/cuda/moe_routing_cuda.h"
#include "ops/moe/experts/cuda_expert_common.h"
#include "ops/moe/experts/cuda_experts.h"
#include "ops/moe/router/router_cuda.h"
#include "ops/nn/linear/fp8_gemm_cublaslt_cuda.h"

namespace mg {

namespace {

using cuda::kLtFp8Block;
using cuda::LtFp8Gemm;
constexpr size_t kBlasWorkspace = cuda::kLtFp8WorkspaceBytes;

int64_t k_blocks(int64_t k) {
  return cuda::lt_fp8_k_blocks(k);
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
    s13_ = upload(cuda::lt_fp8_vec128_weight_scales(b.quantized.w13_quant.scale,
                                                    b.quantized.w13_quant, E, N1, H),
                  b.device);
    s2_ = upload(cuda::lt_fp8_vec128_weight_scales(b.quantized.w2_quant.scale, b.quantized.w2_quant,
                                                   E, H, I),
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
    const auto [ids, weights] = routed_pairs(t, route_, bias_, sc.ids, sc.weights, ctx.stream);
    cuda::launch_moe_align(ids, P, expert_map_.data<int32_t>(), shape_.num_experts, E, sc.align, s);
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
    cuda::dispatch_16bit_dtype(shape_.dtype, "cuda_cublaslt_fp8", [&](auto tag) {
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
    cuda::dispatch_16bit_dtype(shape_.dtype, "cuda_cublaslt_fp8", [&](auto tag) {
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
    cuda::dispatch_16bit_dtype(shape_.dtype, "cuda_cublaslt_fp8", [&](auto tag) {
      using T = decltype(tag);
      if (b2_.defined()) {
        cuda::launch_fp8_rows_bias_act<T>(sc.y_perm, H, sc.y_perm, H, offsets, E, P,
                                          b2_.data<float>(), false, false, act, s);
      }
      cuda::launch_moe_combine<T>(sc.y_perm, sc.align, ids, weights, expert_map_.data<int32_t>(),
                                  nullptr, M, k, H, t.expert_output, s);
    });
  }

  bool takes_routing() const override { return true; }

 private:
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
    return cuda::lt_fp8_device_reason(device.index);
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
    return cuda::lt_fp8_weight_group_reason(quant.weight_key().group());
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
      if (size % kLtFp8Block != 0) {
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
