// The FP8 linear on CUDA, W8A8: y = (x Wᵀ + b) * scale with
//   x quantized per call to e4m3 per token per 128 channels or per token (dynamic: scale =
//     max(amax, 1e-10) / 448, bit for bit the CPU's quantize_fp8_e4m3_group) or with the
//     checkpoint's fixed scale (static: e4m3(clamp(x / s, -448, 448)));
//   the GEMM on cuBLASLt's FP8 tensor cores with VEC128 scales on both operands
//     (ops/nn/linear/fp8_gemm_cublaslt_cuda.h): the weight's scales expanded once here, the
//     activation scales re-laid per call by one small kernel;
//   alpha = scale, then the bias (pre-multiplied by scale) added by one pass.
// Three launches and the GEMM, no host sync: graph-capturable.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <mutex>
#include <set>

#include "framework/core/logging.h"
#include "framework/device/allocator.h"
#include "framework/device/convert.h"
#include "framework/device/cuda/cuda_check.h"
#include "framework/device/cuda/cuda_device.h"
#include "framework/device/cuda/dtype_dispatch.h"
#include "ops/moe/cuda/fp8/fp8_cublaslt_prep_cuda.h"
#include "ops/moe/cuda/fp8/fp8_experts_cuda.h"
#include "ops/nn/cuda_kernels.h"
#include "ops/nn/linear/fp8_gemm_cpu.h"
#include "ops/nn/linear/fp8_gemm_cublaslt_cuda.h"
#include "ops/nn/linear/linear_cuda.h"

namespace mg {

namespace {

constexpr size_t kAlign = 256;

size_t aligned(size_t bytes) {
  return (bytes + kAlign - 1) / kAlign * kAlign;
}

class LinearFp8CudaKernel final : public OpKernel {
 public:
  LinearFp8CudaKernel(const KernelContext& ctx, DType dtype, const WeightQuantization& quant,
                      bool has_bias, float scale)
      : dtype_(dtype),
        in_(ctx.weights[1].dim(1)),
        out_(ctx.weights[1].dim(0)),
        per_token_(quant.activation == ActivationQuant::kStatic || quant.activation_group < 0),
        scale_(scale),
        group_(quant.group),
        activation_(quant.activation),
        gemm_(in_, out_, dtype, ctx.options.device.index) {
    const Device device = ctx.options.device;
    codes_ = to_device_tensor(ctx.weights[1], device);
    w_scales_ = to_device_tensor(
        cuda::lt_fp8_vec128_weight_scales(quant.scale, quant, 1, out_, in_), device);
    if (quant.activation == ActivationQuant::kStatic) {
      Tensor host = Tensor::empty_cpu(DType::kF32, {1});
      host.data<float>()[0] = fp8_activation_quant(quant).static_scale;  // the largest part's
      static_scale_ = to_device_tensor(host, device);
    }
    if (has_bias) {
      // bias * scale, rounded once to the compute dtype (as the BF16 linear's epilogue bias).
      Tensor host = Tensor::empty_cpu(ctx.weights[2].dtype(), ctx.weights[2].shape());
      copy_tensor(host, ctx.weights[2]);
      Tensor f32 = to_f32_cpu(host);
      for (int64_t i = 0; i < f32.numel(); ++i) f32.data<float>()[i] *= scale;
      bias_ = to_device_tensor(cast_cpu(f32, dtype), device);
    }
  }

  // inputs: x [T, in], weight (codes; the kernel uses its own), bias (ditto). outputs: y [T, out].
  void run(const ExecContext& ctx, std::span<const Tensor> inputs,
           std::span<const Tensor> outputs) override {
    const Tensor& x = inputs[0];
    const int64_t tokens = x.dim(0);
    MG_ASSERT(x.dtype() == dtype_ && outputs[0].dtype() == dtype_ && x.dim(1) == in_ &&
                  outputs[0].dim(1) == out_,
              "linear: x {} y {}, FP8 kernel built for {} [*, {}] -> [*, {}]", x.str(),
              outputs[0].str(), dtype_name(dtype_), in_, out_);
    if (tokens == 0) return;
    const Scratch sc(ctx.workspace, tokens, in_, out_, dtype_, per_token_);
    MG_ASSERT(sc.bytes <= ctx.workspace_bytes, "linear: FP8 workspace of {} bytes, need {}",
              ctx.workspace_bytes, sc.bytes);
    const cudaStream_t s = cuda::native(ctx.stream);
    cuda::Fp8QuantArgs q;
    q.x = x.raw();
    q.max_rows = tokens;
    q.k = in_;
    q.per_token = per_token_;
    q.static_scale = static_scale_.defined() ? static_scale_.data<float>() : nullptr;
    q.xq = sc.xq;
    q.xs = sc.xs;
    const int64_t blocks = cuda::lt_fp8_k_blocks(in_);
    cuda::dispatch_16bit_dtype(dtype_, "linear: FP8 kernel",
                               [&](auto tag) { cuda::launch_fp8_quantize<decltype(tag)>(q, s); });
    // cuBLASLt's VEC128 FP8 GEMMs take row counts that are multiples of 4 only
    // (fp8_cublaslt_prep_cuda.h): the GEMM runs `rows` rows over the workspace's padded codes and,
    // when that differs from the token count, into a padded output copied back after.
    const int64_t rows = cuda::fp8_lt_rows(tokens);
    cuda::launch_fp8_vec128_scales_dense(sc.xs, cuda::fp8_act_scale_cols(in_, per_token_), tokens,
                                         rows, blocks, sc.xs_vec, s);
    void* y = rows == tokens ? outputs[0].raw() : sc.y_pad;
    gemm_.run(sc.xq, sc.xs_vec, rows, fp8_codes(codes_), w_scales_.data<float>(), y, sc.blas, s,
              scale_);
    if (y != outputs[0].raw()) {
      MG_CUDA_CHECK(cudaMemcpyAsync(outputs[0].raw(), y,
                                    static_cast<size_t>(tokens * out_) * dtype_size(dtype_),
                                    cudaMemcpyDeviceToDevice, s));
    }
    if (bias_.defined()) {
      cuda::dispatch_16bit_dtype(dtype_, "linear: FP8 kernel", [&](auto tag) {
        cuda::launch_add_bias<decltype(tag)>(outputs[0].raw(), bias_.raw(), tokens, out_, s);
      });
    }
  }

  size_t workspace_bytes(int64_t max_tokens) const override {
    return Scratch(nullptr, max_tokens, in_, out_, dtype_, per_token_).bytes;
  }

  std::string describe() const override {
    std::string act;
    switch (activation_) {
      case ActivationQuant::kStatic:
        act = "activations quantized with the checkpoint's static scale";
        break;
      case ActivationQuant::kDynamic:
      case ActivationQuant::kNone:
        act = per_token_ ? "activations quantized per token"
                         : "activations quantized per token per 128 channels";
        break;
    }
    return fmt::format("cuda cublasLt FP8 {} -> {} (weight scales {}, {}: W8A8)", "E4M3",
                       dtype_name(dtype_), group_.str(), act);
  }

 private:
  // The pieces of the workspace; the sizing (base null) and a call walk the same code.
  struct Scratch {
    uint8_t* xq;
    float* xs;
    float* xs_vec;
    void* y_pad;  // [fp8_lt_rows(tokens), out] when tokens is not a multiple of 4
    void* blas;
    size_t bytes = 0;

    Scratch(void* base, int64_t tokens, int64_t in, int64_t out, DType dtype, bool per_token) {
      auto take = [&](size_t n) {
        std::byte* p = base == nullptr ? nullptr : static_cast<std::byte*>(base) + bytes;
        bytes += aligned(n);
        return p;
      };
      const int64_t cols = cuda::fp8_act_scale_cols(in, per_token);
      const int64_t rows = cuda::fp8_lt_rows(tokens);
      xq = reinterpret_cast<uint8_t*>(take(static_cast<size_t>(rows * in)));
      xs = reinterpret_cast<float*>(take(static_cast<size_t>(tokens * cols) * sizeof(float)));
      xs_vec = reinterpret_cast<float*>(
          take(static_cast<size_t>(rows * cuda::lt_fp8_k_blocks(in)) * sizeof(float)));
      y_pad = take(rows == tokens ? 0 : static_cast<size_t>(rows * out) * dtype_size(dtype));
      blas = take(cuda::kLtFp8WorkspaceBytes);
    }
  };

  DType dtype_;
  int64_t in_, out_;
  bool per_token_;
  float scale_;
  GroupShape group_;
  ActivationQuant activation_;
  Tensor codes_;         // [out, in] F8_E4M3 on the device
  Tensor w_scales_;      // [1, ceil(in / 128), out] F32 VEC128 scales on the device
  Tensor static_scale_;  // F32 [1] on the device, or undefined
  Tensor bias_;          // [out] * scale in the compute dtype, or undefined
  mutable cuda::LtFp8Gemm gemm_;
};

}  // namespace

std::string linear_fp8_cuda_refusal(const KernelContext& ctx, const WeightQuantization& quant) {
  const DType dtype = activation_dtype_of(ctx.options);
  if (dtype != DType::kBF16 && dtype != DType::kF16) {
    return fmt::format("the FP8 GEMM writes BF16 or F16, the activations are {}",
                       dtype_name(dtype));
  }
  const Tensor& w = ctx.weights[1];
  if (w.dtype() != DType::kF8E4M3) {
    return fmt::format("weight codes are {}, not F8_E4M3", dtype_name(w.dtype()));
  }
  if (quant.activation == ActivationQuant::kDynamic && quant.activation_group != -1 &&
      quant.activation_group != 128) {
    return fmt::format("activation groups of {} channels (128 or per token)",
                       quant.activation_group);
  }
  std::string why = cuda::lt_fp8_shape_reason(w.dim(1), w.dim(0));
  if (why.empty()) why = cuda::lt_fp8_weight_group_reason(quant.group);
  if (why.empty()) why = cuda::lt_fp8_device_reason(ctx.options.device.index);
  return why;
}

std::unique_ptr<OpKernel> make_linear_fp8_cuda_kernel(const KernelContext& ctx, bool has_bias,
                                                      float scale,
                                                      const WeightQuantization& quant) {
  MG_ASSERT(ctx.weights.size() > 1 && ctx.weights[1].defined(),
            "linear: CUDA kernel built without its weight");
  MG_ASSERT(!has_bias || (ctx.weights.size() > 2 && ctx.weights[2].defined()),
            "linear: CUDA kernel built without its bias");
  return std::make_unique<LinearFp8CudaKernel>(ctx, activation_dtype_of(ctx.options), quant,
                                               has_bias, scale);
}

void log_fp8_w8a16_fallback_once(std::string_view op, const std::string& reason) {
  static std::mutex mutex;
  static std::set<std::string> logged;
  std::lock_guard<std::mutex> lock(mutex);
  if (!logged.insert(std::string(op) + reason).second) return;
  MG_LOG_WARN("compile",
              "{}: FP8 weights run W8A16 on CUDA (dequantized once at build) where cuBLASLt's FP8 "
              "GEMM does not take them: {}",
              op, reason);
}

}  // namespace mg
