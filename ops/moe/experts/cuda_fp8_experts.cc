#include "ops/moe/experts/cuda_fp8_experts.h"

#include <cuda_runtime_api.h>

#include <memory>

#include "framework/device/allocator.h"
#include "framework/device/convert.h"
#include "framework/device/cuda/cuda_device.h"
#include "framework/device/cuda/dtype_dispatch.h"
#include "ops/moe/cuda/fp8/fp8_experts_cuda.h"
#include "ops/moe/cuda/moe_align_cuda.h"
#include "ops/moe/cuda/moe_routing_cuda.h"
#include "ops/moe/experts/cuda_expert_common.h"
#include "ops/moe/experts/cuda_experts.h"
#include "ops/moe/heuristics/fp8_kernel_choice.h"
#include "ops/moe/router/router_cuda.h"
#include "ops/nn/linear/fp8_gemm_cpu.h"

namespace mg {

namespace {

static_assert(kFp8DecodeMaxTokens == cuda::kFp8DecodeMaxTokens);
static_assert(kFp8TmaMinRows == cuda::kFp8TmaMinRows);

// Host tensors are copied up; tensors already on `device` (the MoE benchmark makes its codes there)
// are adopted.
Tensor upload(const Tensor& host, Device device) {
  if (!host.defined()) return {};
  if (host.device() == device) return host;
  Tensor out = empty_tensor(device, host.dtype(), host.shape());
  copy_tensor(out, host);
  return out;
}

// The kernels' description of a weight's scale groups: S [E, ceil(N / bn), ceil(K / bk)].
cuda::Fp8WeightScales kernel_scales(const Tensor& scale, const WeightQuantization& q, int64_t n,
                                    int64_t k) {
  return {scale.data<float>(), q.group.rows_in(n), q.group.cols_in(k)};
}

Fp8Problem fp8_problem(const ExpertsShape& shape, Device device) {
  return {shape.num_local_experts(), shape.top_k,
          device.is_cuda() ? cuda_device_traits(device).sm90a_kernels : true,
          shape.hidden_size * (shape.w13_rows() + shape.intermediate_size)};
}

// ---- cuda_fp8 --------------------------------------------------------------------------------

class CudaFp8Experts final : public ExpertsMonolithic {
 public:
  CudaFp8Experts(const ExpertsBackend& backend, const ExpertsBuild& b)
      : ExpertsMonolithic(backend),
        shape_(b.shape),
        problem_(fp8_problem(b.shape, b.device)),
        request_(parse_fp8_kernel_request(b.kernel)),
        per_token_(b.quant.activation_key().group().cols == -1),
        route_(route_params(b.config.routing())),
        w13_(upload(b.quantized.w13, b.device)),
        s13_(upload(b.quantized.w13_quant.scale, b.device)),
        w2_(upload(b.quantized.w2, b.device)),
        s2_(upload(b.quantized.w2_quant.scale, b.device)),
        b13_(upload(b.quantized.w13_bias, b.device)),
        b2_(upload(b.quantized.w2_bias, b.device)),
        q13_(b.quantized.w13_quant),
        q2_(b.quantized.w2_quant) {
    const std::vector<int32_t>& g2l = shape_.expert_map.global_to_local;
    Tensor map = Tensor::empty_cpu(DType::kI32, {static_cast<int64_t>(g2l.size())});
    std::copy(g2l.begin(), g2l.end(), map.data<int32_t>());
    expert_map_ = upload(map, b.device);
    identity_experts_ = identity_expert_count(shape_.expert_map);
    if (b.config.routing().has_score_correction_bias) {
      bias_ = upload(to_f32_cpu(b.score_correction_bias), b.device);
    }
    if (b.quant.activation_key().is_static()) {
      // The checkpoint's fixed scales of GEMM1's and GEMM2's inputs, [2] F32 on the device.
      Tensor statics = Tensor::empty_cpu(DType::kF32, {2});
      statics.data<float>()[0] = fp8_activation_quant(b.quantized.w13_quant).static_scale;
      statics.data<float>()[1] = fp8_activation_quant(b.quantized.w2_quant).static_scale;
      static_scales_ = upload(statics, b.device);
    }
  }

  size_t workspace_bytes(int64_t max_rows) const override {
    Workspace ws = Workspace::sizing();
    Scratch(ws, shape_, max_rows);
    return ws.bytes();
  }

  void apply(const DispatchedLogits& t, Workspace& ws, const MoEExecContext& ctx) override {
    const int64_t M = t.num_tokens, k = shape_.top_k, H = shape_.hidden_size;
    const int64_t I = shape_.intermediate_size, E = shape_.num_local_experts();
    const int64_t N1 = shape_.w13_rows();
    Scratch sc(ws, shape_, M);
    if (M == 0) return;
    // The one place a cuda_fp8 forward's kernels are chosen (fp8_kernel_choice.h).
    const Fp8Choice choice = choose_fp8_kernel(problem_, M, request_);
    const cudaStream_t s = cuda::native(ctx.stream);
    const cuda::Fp8WeightScales s13 = kernel_scales(s13_, q13_, N1, H);
    const cuda::Fp8WeightScales s2 = kernel_scales(s2_, q2_, H, I);
    const auto [ids, weights] = routed_pairs(t, route_, bias_, sc.ids, sc.weights, ctx.stream);
    cuda::dispatch_16bit_dtype(shape_.dtype, "cuda_fp8", [&](auto tag) {
      using T = decltype(tag);
      if (choice.kernel == Fp8Kernel::kDecode) {
        cuda::Fp8DecodeArgs d;
        d.x = t.hidden;
        d.topk_ids = ids;
        d.topk_weights = weights;
        d.expert_map = expert_map_.data<int32_t>();
        d.identity_experts = identity_experts_;
        d.w13 = codes(w13_);
        d.s13 = s13;
        d.b13 = b13_.defined() ? b13_.data<float>() : nullptr;
        d.w2 = codes(w2_);
        d.s2 = s2;
        d.b2 = b2_.defined() ? b2_.data<float>() : nullptr;
        d.out = t.expert_output;
        d.scratch = sc.mlp;
        d.scratch_bytes = sc.mlp_bytes;
        d.num_tokens = M;
        d.top_k = k;
        d.hidden = H;
        d.inter = I;
        d.act = cuda_act_params(shape_.activation);
        d.act_per_token = per_token_;
        d.x_static_scale = static_scale(0);
        d.h_static_scale = static_scale(1);
        cuda::launch_fp8_decode_experts<T>(d, s);
        return;
      }
      const int64_t P = M * k;
      cuda::launch_moe_align(ids, P, expert_map_.data<int32_t>(), shape_.num_experts, E, sc.align,
                             s);
      cuda::Fp8ExpertMlpArgs a;
      a.x = t.hidden;
      a.row_to_pair = sc.align.row_to_pair;
      a.top_k = k;
      a.expert_offsets = sc.align.expert_offsets;
      a.num_experts = E;
      a.max_rows = P;
      a.hidden = H;
      a.inter = I;
      a.w13 = codes(w13_);
      a.s13 = s13;
      a.b13 = b13_.defined() ? b13_.data<float>() : nullptr;
      a.w2 = codes(w2_);
      a.s2 = s2;
      a.b2 = b2_.defined() ? b2_.data<float>() : nullptr;
      a.act = cuda_act_params(shape_.activation);
      a.act_per_token = per_token_;
      a.x_static_scale = static_scale(0);
      a.h_static_scale = static_scale(1);
      a.out = sc.y_perm;
      a.scratch = sc.mlp;
      a.scratch_bytes = sc.mlp_bytes;
      cuda::launch_fp8_expert_mlp<T>(a, gemm_kernel(choice.kernel), s);
      // b2 is already in y_perm (added per row by the MLP).
      cuda::launch_moe_combine<T>(sc.y_perm, sc.align, ids, weights, expert_map_.data<int32_t>(),
                                  nullptr, M, k, H, t.expert_output, s);
    });
  }

  bool takes_routing() const override { return true; }

 private:
  static const uint8_t* codes(const Tensor& t) { return fp8_codes(t); }
  // The device pointer of static scale i (0: x, 1: h), or null for dynamic quantization.
  const float* static_scale(int i) const {
    return static_scales_.defined() ? static_scales_.data<float>() + i : nullptr;
  }

  static cuda::Fp8GemmKernel gemm_kernel(Fp8Kernel k) {
    switch (k) {
      case Fp8Kernel::kMma16:
        return cuda::Fp8GemmKernel::kMma16;
      case Fp8Kernel::kMma64:
        return cuda::Fp8GemmKernel::kMma64;
      case Fp8Kernel::kWgmma:
        return cuda::Fp8GemmKernel::kWgmma;
      case Fp8Kernel::kTma:
        return cuda::Fp8GemmKernel::kTma;
      case Fp8Kernel::kTma64:
        return cuda::Fp8GemmKernel::kTma64;
      case Fp8Kernel::kDecode:
        break;
    }
    MG_ASSERT(false, "no FP8 GEMM kernel for {}", fp8_kernel_name(k));
  }

  // Routed ids/weights, the alignment, the permuted outputs and the MLP's (or decode's) scratch;
  // the sizing pass and a call walk the same code.
  struct Scratch {
    int32_t* ids;
    float* weights;
    cuda::MoEAlignment align;
    void* y_perm;
    void* mlp;
    size_t mlp_bytes;

    Scratch(Workspace& ws, const ExpertsShape& shape, int64_t M) {
      const int64_t k = shape.top_k, P = M * k, E = shape.num_local_experts();
      const size_t es = dtype_size(shape.dtype);
      ids = ws.take<int32_t>(P);
      weights = ws.take<float>(P);
      align.expert_counts = ws.take<int32_t>(E);
      align.expert_offsets = ws.take<int32_t>(E + 1);
      align.pair_to_row = ws.take<int32_t>(P);
      align.row_to_pair = ws.take<int32_t>(P);
      y_perm = ws.take<std::byte>(P * shape.hidden_size * static_cast<int64_t>(es));
      mlp_bytes = std::max(
          cuda::fp8_expert_mlp_scratch_bytes(P, shape.hidden_size, shape.intermediate_size, es),
          cuda::fp8_decode_scratch_bytes(std::min<int64_t>(M, kFp8DecodeMaxTokens), k,
                                         shape.hidden_size, shape.intermediate_size, es));
      mlp = ws.take<std::byte>(static_cast<int64_t>(mlp_bytes));
    }
  };

  ExpertsShape shape_;
  Fp8Problem problem_;
  std::optional<Fp8Kernel> request_;
  bool per_token_;
  cuda::RouteParams route_;
  Tensor w13_, s13_, w2_, s2_, b13_, b2_;
  WeightQuantization q13_, q2_;  // group shapes (their scale tensors are the host copies)
  Tensor expert_map_;
  int identity_experts_ = 0;  // the decode kernels' LocalExperts: E when the map is the identity
  Tensor bias_;               // [E] F32 on the device, or undefined
  Tensor static_scales_;      // [2] F32 on the device (static activation scales), or undefined
};

class CudaFp8Backend final : public ExpertsBackend {
 public:
  std::string_view name() const override { return "cuda_fp8"; }
  bool is_monolithic() const override { return true; }
  ActivationFormat activation_format() const override { return ActivationFormat::kStandard; }
  std::string check_device(Device device) const override { return cuda_check_device(device); }
  std::string check_quant(const MoEQuantConfig& quant) const override {
    if (!is_fp8_scheme(quant.scheme())) {
      return fmt::format("takes FP8 weights, not {}", quant_scheme_name(quant.scheme()));
    }
    const QuantKey& a = quant.activation_key();
    if (!a.quantized()) {
      return "quantizes activations (W8A8); W8A16 (" + a.str() +
             " activations) runs on cuda_dequant";
    }
    if (a.dtype() != DType::kF8E4M3 || !(a.group().cols == 128 || a.group().cols == -1) ||
        (a.is_static() && a.group().cols != -1)) {
      return "quantizes activations to F8_E4M3 per token or per 128 channels (dynamic), or with "
             "one static scale, not " +
             a.str();
    }
    const GroupShape g = quant.weight_key().group();
    if (g.cols != -1 && g.cols % cuda::kFp8Group != 0) {
      return fmt::format(
          "weight scales per {} columns: the kernels apply scales per 128-wide K block (scale "
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
    return cuda_check_single_rank(parallel);
  }
  std::string check_shape(const ExpertsShape& shape) const override {
    if (shape.dtype != DType::kBF16 && shape.dtype != DType::kF16) {
      return fmt::format("takes BF16 or F16 activations, not {}", dtype_name(shape.dtype));
    }
    if (shape.num_local_experts() > cuda::kMaxAlignLocalExperts) {
      return fmt::format("at most {} local experts, not {}", cuda::kMaxAlignLocalExperts,
                         shape.num_local_experts());
    }
    std::string why = cuda::fp8_gemm_check(shape.w13_rows(), shape.hidden_size);
    if (why.empty()) why = cuda::fp8_gemm_check(shape.hidden_size, shape.intermediate_size);
    return why;
  }
  std::string check_kernel(std::string_view kernel, const ExpertsShape& shape,
                           Device device) const override {
    std::optional<Fp8Kernel> request;
    try {
      request = parse_fp8_kernel_request(kernel);
    } catch (const Error& e) {
      return e.what();
    }
    return check_fp8_kernel_request(fp8_problem(shape, device), request);
  }
  std::unique_ptr<Experts> create(ExpertsBuild build) const override {
    const std::string why = cuda::fp8_expert_mlp_check(
        build.shape.hidden_size, build.shape.intermediate_size,
        is_gated(build.shape.activation.kind),
        {nullptr, build.quantized.w13_quant.group.rows_in(build.shape.w13_rows()),
         build.quantized.w13_quant.group.cols_in(build.shape.hidden_size)},
        {nullptr, build.quantized.w2_quant.group.rows_in(build.shape.hidden_size),
         build.quantized.w2_quant.group.cols_in(build.shape.intermediate_size)});
    MG_CHECK(why.empty(), "cuda_fp8: {}", why);
    return std::make_unique<CudaFp8Experts>(*this, build);
  }
};

// ---- cuda_dequant ----------------------------------------------------------------------------

class CudaDequantBackend final : public ExpertsBackend {
 public:
  std::string_view name() const override { return "cuda_dequant"; }
  bool is_monolithic() const override { return cuda_moe_backend().is_monolithic(); }
  ActivationFormat activation_format() const override {
    return cuda_moe_backend().activation_format();
  }
  std::string check_device(Device device) const override { return cuda_check_device(device); }
  // Any scheme whose codes dequantize_cpu reads: FP8 (W8A16) and the weight-only integer schemes
  // (the WNA16 oracle's fallback until a kernel reads the packed codes).
  std::string check_quant(const MoEQuantConfig& quant) const override {
    const QuantScheme scheme = quant.scheme();
    const bool fp4 = scheme == QuantScheme::kMxfp4 || scheme == QuantScheme::kNvfp4;
    if (!is_fp8_scheme(scheme) && !fp4 && !is_wna16_scheme(scheme)) {
      return fmt::format("takes FP8, FP4 (MXFP4, NVFP4) or weight-only integer weights, not {}",
                         quant_scheme_name(scheme));
    }
    if (quant.activation_key().quantized()) {
      return "runs weight-only (W8A16 / W4A16; pass --activation-quant none), not activations " +
             quant.activation_key().str();
    }
    return {};
  }
  std::string check_activation(const ActivationConfig& a) const override {
    return cuda_moe_backend().check_activation(a);
  }
  std::string check_routing(const RoutingConfig& routing) const override {
    return cuda_moe_backend().check_routing(routing);
  }
  std::string check_parallel(const ParallelConfig& parallel) const override {
    return cuda_check_single_rank(parallel);
  }
  std::string check_shape(const ExpertsShape& shape) const override {
    return cuda_moe_backend().check_shape(shape);
  }
  std::string check_kernel(std::string_view kernel, const ExpertsShape& shape,
                           Device device) const override {
    return cuda_moe_backend().check_kernel(kernel, shape, device);
  }
  std::unique_ptr<Experts> create(ExpertsBuild build) const override {
    // Dequantized once (FP8 or packed FP4 codes: dequantize_cpu), F32 on the host, then
    // cuda_moe's conversion to the activation dtype.
    build.weights = {
        dequantize_cpu(build.quantized.w13, build.quantized.w13_quant), build.quantized.w13_bias,
        dequantize_cpu(build.quantized.w2, build.quantized.w2_quant), build.quantized.w2_bias};
    build.quantized = {};
    build.quant = MoEQuantConfig::unquantized(build.shape.dtype);
    return cuda_moe_backend().create(std::move(build));
  }
};

}  // namespace

const ExpertsBackend& cuda_fp8_backend() {
  static const CudaFp8Backend backend;
  return backend;
}

const ExpertsBackend& cuda_dequant_backend() {
  static const CudaDequantBackend backend;
  return backend;
}

}  // namespace mg
