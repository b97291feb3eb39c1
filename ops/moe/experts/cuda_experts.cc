#include "ops/moe/experts/cuda_experts.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <initializer_list>
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
#include "ops/moe/heuristics/unquantized_kernel_choice.h"
#include "ops/moe/router/router_cuda.h"
#include "ops/nn/linear/linear_gemm_cuda.h"

namespace mg {

namespace {

// ---- cuda_moe --------------------------------------------------------------------------------

static_assert(kDecodeKernelMaxTokens == cuda::kDecodeMaxTokens);

// "" when `kernel` parses and can run `shape` on `device` for some token count, else why.
// `pipelines`: the pipelines the backend has (cuda_grouped only the grouped one).
std::string check_kernel_request(std::string_view kernel, const ExpertsShape& shape, Device device,
                                 std::initializer_list<CudaMoEPipeline> pipelines) {
  CudaKernelRequest request;
  try {
    request = parse_cuda_kernel_request(kernel);
  } catch (const Error& e) {
    return e.what();
  }
  if (request.pipeline &&
      std::find(pipelines.begin(), pipelines.end(), *request.pipeline) == pipelines.end()) {
    return fmt::format("'{}' is not one of this backend's kernels", kernel);
  }
  if (!device.is_cuda()) return {};  // the device check refuses it
  return check_cuda_kernel_request(CudaMoEProblem::of(shape), cuda_device_traits(device), request);
}

class CudaMoEExperts final : public ExpertsMonolithic {
 public:
  CudaMoEExperts(const ExpertsBackend& backend, const MoEConfig& config, const ExpertsShape& shape,
                 const CanonicalExpertWeights& weights, const Tensor& score_correction_bias,
                 Device device, std::string_view kernel)
      : ExpertsMonolithic(backend),
        shape_(shape),
        problem_(CudaMoEProblem::of(shape)),
        device_(cuda_device_traits(device)),
        request_(parse_cuda_kernel_request(kernel)),
        weights_(weights, shape, device),
        cublas_(shape_, weights_, device),
        route_(route_params(config.routing())) {
    if (config.routing().has_score_correction_bias) {
      bias_ = empty_tensor(device, DType::kF32, score_correction_bias.shape());
      copy_tensor(bias_, to_f32_cpu(score_correction_bias));
    }
  }

  size_t workspace_bytes(int64_t max_rows) const override {
    Workspace ws = Workspace::sizing();
    Scratch(ws, shape_, max_rows, decode_max_tokens(), std::nullopt);
    return ws.bytes();
  }

  void apply(const DispatchedLogits& t, Workspace& ws, const MoEExecContext& ctx) override {
    const int64_t M = t.num_tokens, k = shape_.top_k, H = shape_.hidden_size;
    if (M == 0) {
      Scratch(ws, shape_, M, decode_max_tokens(), CudaMoEPipeline::kDecode);
      return;
    }
    // The one place a cuda_moe forward's kernels are chosen (unquantized_kernel_choice.h).
    const CudaKernelChoice choice = choose_cuda_kernels(problem_, M, device_, request_);
    Scratch sc(ws, shape_, M, decode_max_tokens(), choice.pipeline);
    const cudaStream_t s = cuda::native(ctx.stream);
    cuda::dispatch_float_dtype(shape_.dtype, [&](auto tag) {
      using T = decltype(tag);
      const RoutedPairs routed = routed_pairs(t, route_, bias_, sc.ids, sc.weights, ctx.stream);
      const int32_t* ids = routed.ids;
      const float* weights = routed.weights;
      if (choice.pipeline == CudaMoEPipeline::kDecode) {
        cuda::DecodeExpertsArgs d;
        d.x = t.hidden;
        d.topk_ids = ids;
        d.topk_weights = weights;
        d.expert_map = weights_.map();
        d.identity_experts = weights_.identity_experts;
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
        cuda::launch_moe_scale_input<T>(t.hidden, weights, M, k, H, sc.x_scaled, sc.weights, s);
        x = sc.x_scaled;
        weights = sc.weights;
      }
      if (choice.pipeline == CudaMoEPipeline::kCublas) {
        cublas_.run(x, M, ids, weights, *sc.grouped, *sc.cublas, t.expert_output, ctx.stream);
      } else {
        run_grouped_experts(shape_, weights_, x, M, ids, weights, *sc.grouped, choice.gemm1,
                            choice.gemm2, t.expert_output, ctx.stream);
      }
    });
  }

  bool takes_routing() const override { return true; }

 private:
  // The decode kernels' scratch rows: the auto choice sends them at most kAutoDecodeMaxTokens, a
  // forced `decode` up to 16.
  int64_t decode_max_tokens() const {
    return request_.pipeline == CudaMoEPipeline::kDecode ? kDecodeKernelMaxTokens
                                                         : kAutoDecodeMaxTokens;
  }

  // The sizing pass (max tokens, no pipeline) carves every pipeline's scratch; a call carves what
  // its pipeline uses, which is never more.
  struct Scratch {
    int32_t* ids;
    float* weights;
    void* decode_act;  // [M k, I], decode path
    void* x_scaled;    // [M, H], Llama-4 on the grouped and cuBLAS paths
    std::optional<GroupedScratch> grouped;
    std::optional<CublasExpertGemms::Scratch> cublas;

    Scratch(Workspace& ws, const ExpertsShape& shape, int64_t M, int64_t decode_max_tokens,
            std::optional<CudaMoEPipeline> pipeline) {
      const int64_t k = shape.top_k, es = dtype_size(shape.dtype);
      ids = ws.take<int32_t>(M * k);
      weights = ws.take<float>(M * k);
      const int64_t decode_rows = std::min(M, decode_max_tokens) * k;
      decode_act = ws.take<std::byte>(decode_rows * shape.intermediate_size * es);
      x_scaled = ws.take<std::byte>(shape.weight_on_input ? M * shape.hidden_size * es : 0);
      const bool all = !pipeline.has_value();
      grouped.emplace(ws, shape, all || *pipeline != CudaMoEPipeline::kDecode ? M : 0);
      cublas.emplace(ws, shape, all || *pipeline == CudaMoEPipeline::kCublas ? M : 0);
    }
  };

  ExpertsShape shape_;
  CudaMoEProblem problem_;
  CudaDeviceTraits device_;
  CudaKernelRequest request_;
  CudaExpertWeights weights_;
  CublasExpertGemms cublas_;
  cuda::RouteParams route_;
  Tensor bias_;  // [E] F32 on the device, or undefined
};

// ---- cuda_grouped ----------------------------------------------------------------------------

class CudaGroupedExperts final : public ExpertsModular {
 public:
  CudaGroupedExperts(const ExpertsBackend& backend, const ExpertsShape& shape,
                     const CanonicalExpertWeights& weights, Device device, std::string_view kernel)
      : ExpertsModular(backend),
        shape_(shape),
        problem_(CudaMoEProblem::of(shape)),
        device_(cuda_device_traits(device)),
        request_(parse_cuda_kernel_request(kernel)),
        weights_(weights, shape, device) {
    request_.pipeline = CudaMoEPipeline::kGrouped;  // its only pipeline
  }

  size_t workspace_bytes(int64_t max_rows) const override {
    Workspace ws = Workspace::sizing();
    GroupedScratch(ws, shape_, max_rows);
    return ws.bytes();
  }

  void apply(const DispatchedTokens& t, Workspace& ws, const MoEExecContext& ctx) override {
    GroupedScratch sc(ws, shape_, t.num_tokens);
    if (t.num_tokens == 0) return;
    const CudaKernelChoice choice = choose_cuda_kernels(problem_, t.num_tokens, device_, request_);
    run_grouped_experts(shape_, weights_, t.hidden, t.num_tokens, t.topk_ids, t.topk_weights, sc,
                        choice.gemm1, choice.gemm2, t.expert_output, ctx.stream);
  }

 private:
  ExpertsShape shape_;
  CudaMoEProblem problem_;
  CudaDeviceTraits device_;
  CudaKernelRequest request_;
  CudaExpertWeights weights_;
};

// ---- cuda_cublas -----------------------------------------------------------------------------

class CudaCublasExperts final : public ExpertsModular {
 public:
  CudaCublasExperts(const ExpertsBackend& backend, const ExpertsShape& shape,
                    const CanonicalExpertWeights& weights, Device device)
      : ExpertsModular(backend),
        shape_(shape),
        weights_(weights, shape, device),
        gemms_(shape_, weights_, device) {}

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

class CudaMoEBackend final : public CudaBackendBase {
 public:
  std::string_view name() const override { return "cuda_moe"; }
  bool is_monolithic() const override { return true; }
  ActivationFormat activation_format() const override { return ActivationFormat::kStandard; }
  std::string check_routing(const RoutingConfig& routing) const override {
    return check_cuda_routing(routing);
  }
  std::string check_shape(const ExpertsShape& shape) const override {
    std::string why = cuda::decode_experts_check(shape.hidden_size, shape.intermediate_size);
    return why.empty() ? cuda_check_grouped_shape(shape) : why;
  }
  std::string check_kernel(std::string_view kernel, const ExpertsShape& shape,
                           Device device) const override {
    return check_kernel_request(
        kernel, shape, device,
        {CudaMoEPipeline::kDecode, CudaMoEPipeline::kGrouped, CudaMoEPipeline::kCublas});
  }
  std::unique_ptr<Experts> create(ExpertsBuild build) const override {
    return std::make_unique<CudaMoEExperts>(*this, build.config, build.shape, build.weights,
                                            build.score_correction_bias, build.device,
                                            build.kernel);
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
  std::string check_kernel(std::string_view kernel, const ExpertsShape& shape,
                           Device device) const override {
    return check_kernel_request(kernel, shape, device, {CudaMoEPipeline::kGrouped});
  }
  std::unique_ptr<Experts> create(ExpertsBuild build) const override {
    return std::make_unique<CudaGroupedExperts>(*this, build.shape, build.weights, build.device,
                                                build.kernel);
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
    return std::make_unique<CudaCublasExperts>(*this, build.shape, build.weights, build.device);
  }
};

}  // namespace

const ExpertsBackend& cuda_moe_backend() {
  static const CudaMoEBackend backend;
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
