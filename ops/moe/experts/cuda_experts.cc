#include "ops/moe/experts/cuda_experts.h"

#include <cuda_runtime_api.h>

#include <algorithm>
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
#include "ops/moe/experts/cuda_cublas_expert_gemms.h"
#include "ops/moe/experts/cuda_expert_common.h"
#include "ops/moe/router/router_cuda.h"
#include "ops/nn/linear/linear_gemm_cuda.h"

namespace mg {

namespace {

// ---- cuda_fused ------------------------------------------------------------------------------

// Which pipeline the fused backend runs for a batch, from the measurements in
// docs/performance.md and the grouped GEMM's sweeps (.scratch-gemm/NOTES.md; H100, bf16):
//   decode   M <= kFusedDecodeMaxTokens: the two weight-streaming decode kernels (at 16 tokens
//            the grouped GEMM already matches or beats them on 3 of the 4 reference shapes);
//   cublas   every expert has >= 128 rows on average and its GEMM1 is >= 12 GFLOP: there
//            cuBLASLt's per-expert GEMMs still win; the persistent TMA grouped GEMM1 + GEMM2
//            alone take longer than the whole cuBLAS layer (gpt-oss-120b 16384 tokens, 17 GFLOP
//            per expert: 7.0 ms vs 6.8 ms; mixtral 1024 tokens, 60 GFLOP: 1.8 ms vs 1.5 ms;
//            deepseek-v3 16384 tokens, 30 GFLOP: 25.2 ms vs 22.1 ms). Also from 4 GFLOP when
//            there are fewer than 128 experts: the rule before the TMA kernel, not re-measured;
//   grouped  everything else. With >= 128 experts of 4-12 GFLOP the grouped GEMMs beat the 2·E
//            per-expert launches: qwen3-30b-a3b 16384 tokens (6.4 GFLOP per expert): 2.5 ms of
//            GEMMs vs a 3.8 ms cuBLAS layer; gpt-oss-120b 4096 tokens (4.2 GFLOP): 2.9 ms vs
//            4.0 ms; deepseek-v3 4096 tokens (7.5 GFLOP): 9.9 ms vs 11.5 ms.
enum class FusedPath { kDecode, kGrouped, kCublas };
constexpr int64_t kFusedDecodeMaxTokens = 8;
static_assert(kFusedDecodeMaxTokens <= cuda::kDecodeMaxTokens);

FusedPath fused_path(const ExpertsShape& shape, int64_t M) {
  if (M <= kFusedDecodeMaxTokens) return FusedPath::kDecode;
  const int64_t experts = std::max<int64_t>(1, shape.num_local_experts());
  const double rows_per_expert = static_cast<double>(M) * shape.top_k / experts;
  const double gemm1_flops = 2.0 * rows_per_expert * shape.w13_rows() * shape.hidden_size;
  if (rows_per_expert >= 128) {
    if (gemm1_flops >= 12e9) return FusedPath::kCublas;
    if (gemm1_flops >= 4e9 && experts < 128) return FusedPath::kCublas;
  }
  return FusedPath::kGrouped;
}

class CudaFusedExperts final : public ExpertsMonolithic {
 public:
  CudaFusedExperts(const MoEConfig& config, const ExpertsShape& shape,
                   const CanonicalExpertWeights& weights, const Tensor& score_correction_bias,
                   Device device)
      : shape_(shape),
        weights_(weights, shape, device),
        cublas_(shape_, weights_, device),
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
    const FusedPath path = fused_path(shape_, M);
    cuda::dispatch_float_dtype(shape_.dtype, [&](auto tag) {
      using T = decltype(tag);
      // Router logits are F32 on every device (router_cuda.h).
      cuda::launch_moe_route<float>(route_, t.router_logits, M,
                                    bias_.defined() ? bias_.data<float>() : nullptr, sc.ids,
                                    sc.weights, s);
      if (path == FusedPath::kDecode) {
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
      if (path == FusedPath::kCublas) {
        cublas_.run(x, M, sc.ids, sc.weights, *sc.grouped, *sc.cublas, t.expert_output, ctx.stream);
      } else {
        run_grouped_experts(shape_, weights_, x, M, sc.ids, sc.weights, *sc.grouped,
                            t.expert_output, ctx.stream);
      }
    });
  }

 private:
  // The sizing pass (max tokens) carves every path's scratch; a call carves what its path uses,
  // which is never more.
  struct Scratch {
    int32_t* ids;
    float* weights;
    void* decode_act;  // [M k, I], decode path
    void* x_scaled;    // [M, H], Llama-4 on the grouped and cuBLAS paths
    std::optional<GroupedScratch> grouped;
    std::optional<CublasExpertGemms::Scratch> cublas;

    Scratch(Workspace& ws, const ExpertsShape& shape, int64_t M) {
      const int64_t k = shape.top_k, es = dtype_size(shape.dtype);
      const FusedPath path = fused_path(shape, M);
      ids = ws.take<int32_t>(M * k);
      weights = ws.take<float>(M * k);
      const int64_t decode_rows = std::min(M, kFusedDecodeMaxTokens) * k;
      decode_act = ws.take<std::byte>(decode_rows * shape.intermediate_size * es);
      x_scaled = ws.take<std::byte>(shape.weight_on_input ? M * shape.hidden_size * es : 0);
      const bool sizing = ws.is_sizing();
      grouped.emplace(ws, shape, path != FusedPath::kDecode || sizing ? M : 0);
      cublas.emplace(ws, shape, path == FusedPath::kCublas || sizing ? M : 0);
    }
  };

  ExpertsShape shape_;
  CudaExpertWeights weights_;
  CublasExpertGemms cublas_;
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
  CudaCublasExperts(const ExpertsShape& shape, const CanonicalExpertWeights& weights, Device device)
      : shape_(shape), weights_(weights, shape, device), gemms_(shape_, weights_, device) {}

  std::string_view name() const override { return "cuda_cublas"; }
  ActivationFormat activation_format() const override { return ActivationFormat::kStandard; }
  bool graph_capturable() const override { return false; }  // reads the expert counts back

  size_t workspace_bytes(int64_t max_rows) const override {
    Workspace ws = Workspace::sizing();
    GroupedScratch(ws, shape_, max_rows);
    CublasExpertGemms::Scratch(ws, shape_, max_rows);
    return ws.bytes();
  }

  void apply(const DispatchedTokens& t, Workspace& ws, const MoEExecContext& ctx) override {
    const GroupedScratch g(ws, shape_, t.num_tokens);
    const CublasExpertGemms::Scratch sc(ws, shape_, t.num_tokens);
    gemms_.run(t.hidden, t.num_tokens, t.topk_ids, t.topk_weights, g, sc, t.expert_output,
               ctx.stream);
  }

 private:
  ExpertsShape shape_;
  CudaExpertWeights weights_;
  CublasExpertGemms gemms_;
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
