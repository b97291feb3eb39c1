#include "ops/moe/experts/cuda_experts.h"

#include <cuda_runtime_api.h>

#include <memory>
#include <optional>
#include <vector>

#include "framework/device/allocator.h"
#include "framework/device/convert.h"
#include "framework/device/cuda/cuda_check.h"
#include "framework/device/cuda/cuda_device.h"
#include "framework/device/cuda/dtype_dispatch.h"
#include "ops/moe/cuda/decode_experts_cuda.h"
#include "ops/moe/cuda/moe_elementwise_cuda.h"
#include "ops/moe/cuda/moe_routing_cuda.h"
#include "ops/moe/experts/cuda_expert_common.h"
#include "ops/moe/router/router_cuda.h"
#include "ops/nn/linear/linear_gemm_cuda.h"

namespace mg {

namespace {

// ---- cuda_fused ------------------------------------------------------------------------------

class CudaFusedExperts final : public ExpertsMonolithic {
 public:
  CudaFusedExperts(const MoEConfig& config, const ExpertsShape& shape,
                   const CanonicalExpertWeights& weights, const Tensor& score_correction_bias,
                   Device device)
      : shape_(shape),
        weights_(weights, shape, device),
        route_(route_params(config.routing())) {
    if (config.routing().has_score_correction_bias) {
      bias_ = empty_tensor(device, DType::kF32, score_correction_bias.shape());
      copy_tensor(bias_, to_f32_cpu(score_correction_bias));
    }
  }

  std::string_view name() const override { return "cuda_fused"; }

  size_t workspace_bytes(int64_t max_rows) const override {
    Workspace ws = Workspace::sizing();
    Scratch(ws, shape_, max_rows);
    return ws.bytes();
  }

  void apply(const DispatchedLogits& t, Workspace& ws, const MoEExecContext& ctx) override {
    const int64_t M = t.num_tokens, k = shape_.top_k, H = shape_.hidden_size;
    Scratch sc(ws, shape_, M);
    if (M == 0) return;
    const cudaStream_t s = cuda::native(ctx.stream);
    cuda::dispatch_float_dtype(shape_.dtype, [&](auto tag) {
      using T = decltype(tag);
      // Router logits are F32 on every device (router_cuda.h).
      cuda::launch_moe_route<float>(route_, t.router_logits, M,
                                    bias_.defined() ? bias_.data<float>() : nullptr, sc.ids,
                                    sc.weights, s);
      if (M <= cuda::kDecodeMaxTokens) {
        cuda::DecodeExpertsArgs d;
        d.x = t.hidden;
        d.topk_ids = sc.ids;
        d.topk_weights = sc.weights;
        d.expert_map = weights_.map();
        d.w13 = weights_.w13.raw();
        d.b13 = weights_.b13();
        d.w2 = weights_.w2.raw();
        d.b2 = weights_.b2();
        d.act_scratch = sc.decode_act;
        d.out = t.expert_output;
        d.num_tokens = M;
        d.top_k = k;
        d.hidden = H;
        d.inter = shape_.intermediate_size;
        d.act = cuda_act_params(shape_.activation);
        d.weight_on_input = shape_.weight_on_input;
        cuda::launch_decode_experts<T>(d, s);
        return;
      }
      const void* x = t.hidden;
      if (shape_.weight_on_input) {  // Llama-4: scale the input, weights become 1
        cuda::launch_moe_scale_input<T>(t.hidden, sc.weights, M, k, H, sc.x_scaled, sc.weights, s);
        x = sc.x_scaled;
      }
      run_grouped_experts(shape_, weights_, x, M, sc.ids, sc.weights, *sc.grouped,
                          t.expert_output, ctx.stream);
    });
  }

 private:
  struct Scratch {
    int32_t* ids;
    float* weights;
    void* decode_act;  // [M k, I], decode path
    void* x_scaled;    // [M, H], Llama-4 on the grouped path
    std::optional<GroupedScratch> grouped;

    Scratch(Workspace& ws, const ExpertsShape& shape, int64_t M) {
      const int64_t k = shape.top_k, es = dtype_size(shape.dtype);
      ids = ws.take<int32_t>(M * k);
      weights = ws.take<float>(M * k);
      const int64_t decode_rows = std::min(M, cuda::kDecodeMaxTokens) * k;
      decode_act = ws.take<std::byte>(decode_rows * shape.intermediate_size * es);
      x_scaled = ws.take<std::byte>(shape.weight_on_input ? M * shape.hidden_size * es : 0);
      grouped.emplace(ws, shape, M > cuda::kDecodeMaxTokens || ws.is_sizing() ? M : 0);
    }
  };

  ExpertsShape shape_;
  CudaExpertWeights weights_;
  cuda::RouteParams route_;
  Tensor bias_;  // [E] F32 on the device, or undefined
};

// ---- cuda_grouped ----------------------------------------------------------------------------

class CudaGroupedExperts final : public ExpertsModular {
 public:
  CudaGroupedExperts(const ExpertsShape& shape, const CanonicalExpertWeights& weights,
                     Device device)
      : shape_(shape), weights_(weights, shape, device) {}

  std::string_view name() const override { return "cuda_grouped"; }
  ActivationFormat activation_format() const override { return ActivationFormat::kStandard; }

  size_t workspace_bytes(int64_t max_rows) const override {
    Workspace ws = Workspace::sizing();
    GroupedScratch(ws, shape_, max_rows);
    return ws.bytes();
  }

  void apply(const DispatchedTokens& t, Workspace& ws, const MoEExecContext& ctx) override {
    GroupedScratch sc(ws, shape_, t.num_tokens);
    run_grouped_experts(shape_, weights_, t.hidden, t.num_tokens, t.topk_ids, t.topk_weights, sc,
                        t.expert_output, ctx.stream);
  }

 private:
  ExpertsShape shape_;
  CudaExpertWeights weights_;
};

// ---- cuda_cublas -----------------------------------------------------------------------------

class CudaCublasExperts final : public ExpertsModular {
 public:
  CudaCublasExperts(const ExpertsShape& shape, const CanonicalExpertWeights& weights,
                    Device device)
      : shape_(shape), weights_(weights, shape, device) {
    const int64_t E = shape.num_local_experts(), H = shape.hidden_size;
    const int64_t N1 = shape.w13_rows(), I = shape.intermediate_size;
    const int64_t es = dtype_size(shape.dtype);
    // One GEMM object per expert and matrix: the bias sits in the epilogue and is fixed per
    // object (cuBLASLt's bias pointer is part of the matmul descriptor).
    for (int64_t e = 0; e < E; ++e) {
      const void* b13 = weights_.w13_bias.defined()
                            ? static_cast<const std::byte*>(weights_.w13_bias.raw()) + e * N1 * es
                            : nullptr;
      gemm1_.push_back(
          std::make_unique<cuda::GemmXwt>(shape.dtype, H, N1, b13, device.index));
      gemm2_.push_back(std::make_unique<cuda::GemmXwt>(shape.dtype, I, H, nullptr, device.index));
    }
    MG_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&host_offsets_), (E + 1) * sizeof(int32_t)));
  }
  ~CudaCublasExperts() override { cudaFreeHost(host_offsets_); }

  std::string_view name() const override { return "cuda_cublas"; }
  ActivationFormat activation_format() const override { return ActivationFormat::kStandard; }
  bool graph_capturable() const override { return false; }  // reads the expert counts back

  size_t workspace_bytes(int64_t max_rows) const override {
    Workspace ws = Workspace::sizing();
    Scratch(ws, shape_, max_rows);
    return ws.bytes();
  }

  void apply(const DispatchedTokens& t, Workspace& ws, const MoEExecContext& ctx) override {
    const int64_t M = t.num_tokens, k = shape_.top_k, H = shape_.hidden_size;
    const int64_t E = shape_.num_local_experts(), I = shape_.intermediate_size;
    const int64_t N1 = shape_.w13_rows(), es = dtype_size(shape_.dtype);
    Scratch sc(ws, shape_, M);
    if (M == 0) return;
    const cudaStream_t s = cuda::native(ctx.stream);
    const GroupedScratch& g = sc.grouped;
    cuda::launch_moe_align(t.topk_ids, M * k, weights_.map(), shape_.num_experts, E, g.align, s);
    cuda::dispatch_float_dtype(shape_.dtype,
                               [&](auto tag) {
                                 cuda::launch_moe_gather<decltype(tag)>(t.hidden, M, k, H, g.align,
                                                                        g.x_perm, s);
                               });
    // The per-expert GEMM sizes are host arguments: read the offsets back (the one sync).
    MG_CUDA_CHECK(cudaMemcpyAsync(host_offsets_, g.align.expert_offsets, (E + 1) * sizeof(int32_t),
                                  cudaMemcpyDeviceToHost, s));
    MG_CUDA_CHECK(cudaStreamSynchronize(s));
    auto row = [&](void* base, int64_t r, int64_t cols) {
      return static_cast<std::byte*>(base) + r * cols * es;
    };
    for (int64_t e = 0; e < E; ++e) {
      const int64_t begin = host_offsets_[e], rows = host_offsets_[e + 1] - begin;
      if (rows == 0) continue;
      gemm1_[e]->run(row(g.x_perm, begin, H), rows,
                     static_cast<const std::byte*>(weights_.w13.raw()) + e * N1 * H * es,
                     row(sc.h1, begin, N1), 1.0f, sc.blas, cuda::GemmXwt::kWorkspaceBytes, s);
    }
    const int64_t P = host_offsets_[E];
    cuda::dispatch_float_dtype(shape_.dtype, [&](auto tag) {
      cuda::launch_moe_activation<decltype(tag)>(sc.h1, P, I, cuda_act_params(shape_.activation),
                                                 g.h_perm, s);
    });
    for (int64_t e = 0; e < E; ++e) {
      const int64_t begin = host_offsets_[e], rows = host_offsets_[e + 1] - begin;
      if (rows == 0) continue;
      gemm2_[e]->run(row(g.h_perm, begin, I), rows,
                     static_cast<const std::byte*>(weights_.w2.raw()) + e * H * I * es,
                     row(g.y_perm, begin, H), 1.0f, sc.blas, cuda::GemmXwt::kWorkspaceBytes, s);
    }
    cuda::dispatch_float_dtype(shape_.dtype, [&](auto tag) {
      cuda::launch_moe_combine<decltype(tag)>(g.y_perm, g.align, t.topk_ids, t.topk_weights,
                                              weights_.map(), weights_.b2(), M, k, H,
                                              t.expert_output, s);
    });
  }

 private:
  struct Scratch {
    GroupedScratch grouped;
    void* h1;    // [P, N1] before the activation
    void* blas;  // cuBLAS workspace

    Scratch(Workspace& ws, const ExpertsShape& shape, int64_t M)
        : grouped(ws, shape, M),
          h1(ws.take<std::byte>(M * shape.top_k * shape.w13_rows() * dtype_size(shape.dtype))),
          blas(ws.take<std::byte>(cuda::GemmXwt::kWorkspaceBytes)) {}
  };

  ExpertsShape shape_;
  CudaExpertWeights weights_;
  std::vector<std::unique_ptr<cuda::GemmXwt>> gemm1_;
  std::vector<std::unique_ptr<cuda::GemmXwt>> gemm2_;
  int32_t* host_offsets_ = nullptr;  // pinned [E_local + 1]
};

// ---- Backends --------------------------------------------------------------------------------

class CudaBackendBase : public ExpertsBackend {
 public:
  std::string check_device(Device device) const override { return cuda_check_device(device); }
  std::string check_quant(const MoEQuantConfig& quant) const override {
    return cuda_check_quant(quant);
  }
  std::string check_activation(const ActivationConfig&) const override { return {}; }
  std::string check_parallel(const ParallelConfig& parallel) const override {
    return cuda_check_parallel(parallel);
  }
};

class CudaFusedBackend final : public CudaBackendBase {
 public:
  std::string_view name() const override { return "cuda_fused"; }
  bool is_monolithic() const override { return true; }
  ActivationFormat activation_format() const override { return ActivationFormat::kStandard; }
  std::string check_routing(const RoutingConfig& routing) const override {
    return check_cuda_routing(routing);
  }
  std::string check_shape(const ExpertsShape& shape) const override {
    std::string why = cuda::decode_experts_check(shape.hidden_size, shape.intermediate_size);
    return why.empty() ? cuda_check_grouped_shape(shape) : why;
  }
  std::unique_ptr<Experts> create(ExpertsBuild build) const override {
    return std::make_unique<CudaFusedExperts>(build.config, build.shape, build.weights,
                                              build.score_correction_bias, build.device);
  }
};

class CudaGroupedBackend final : public CudaBackendBase {
 public:
  std::string_view name() const override { return "cuda_grouped"; }
  bool is_monolithic() const override { return false; }
  ActivationFormat activation_format() const override { return ActivationFormat::kStandard; }
  std::string check_shape(const ExpertsShape& shape) const override {
    return cuda_check_grouped_shape(shape);
  }
  std::unique_ptr<Experts> create(ExpertsBuild build) const override {
    return std::make_unique<CudaGroupedExperts>(build.shape, build.weights, build.device);
  }
};

class CudaCublasBackend final : public CudaBackendBase {
 public:
  std::string_view name() const override { return "cuda_cublas"; }
  bool is_monolithic() const override { return false; }
  ActivationFormat activation_format() const override { return ActivationFormat::kStandard; }
  std::string check_shape(const ExpertsShape& shape) const override {
    if (shape.num_local_experts() > cuda::kMaxAlignLocalExperts) {
      return fmt::format("at most {} local experts", cuda::kMaxAlignLocalExperts);
    }
    // cuBLASLt is handed rows inside the permuted buffers: every row must start 16-byte aligned.
    if (shape.hidden_size % 8 != 0 || shape.intermediate_size % 8 != 0) {
      return fmt::format("hidden {} and intermediate {} must be multiples of 8 (16-byte rows)",
                         shape.hidden_size, shape.intermediate_size);
    }
    return {};
  }
  std::unique_ptr<Experts> create(ExpertsBuild build) const override {
    return std::make_unique<CudaCublasExperts>(build.shape, build.weights, build.device);
  }
};

}  // namespace

const ExpertsBackend& cuda_fused_backend() {
  static const CudaFusedBackend backend;
  return backend;
}

const ExpertsBackend& cuda_grouped_backend() {
  static const CudaGroupedBackend backend;
  return backend;
}

const ExpertsBackend& cuda_cublas_backend() {
  static const CudaCublasBackend backend;
  return backend;
}

}  // namespace mg
