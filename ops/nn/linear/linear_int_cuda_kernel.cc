// The weight-only INT4 / INT8 linear on CUDA (W4A16 / W8A16), y = (x Wᵀ + b) * scale, with the
// codes kept packed on the GPU (int_linear_cuda.h: the device layout, made here once at build):
//   up to kIntGemvMaxRows rows (decode): one GEMV launch that dequantizes in registers, with
//     alpha = scale and the bias (pre-multiplied by scale, rounded once to the compute dtype);
//   more rows (prefill): the whole weight dequantized into this kernel's workspace in the compute
//     dtype, then the BF16/F16 GEMM (GemmXwt: cuBLASLt, the bias in its epilogue).
// Why not a dequantize-in-the-mainloop tensor-core GEMM for prefill: at 9+ rows a linear is
// compute-bound soon after, and the 2 extra bytes per element written and read back cost about
// what the GEMM itself does at a few hundred rows; the simple path reuses the tuned cuBLASLt GEMM.
// Two launches at most, no host sync, no allocation per call: graph-capturable.
#include <cmath>
#include <cstddef>
#include <mutex>
#include <set>

#include "framework/core/int_quant.h"
#include "framework/core/logging.h"
#include "framework/device/allocator.h"
#include "framework/device/convert.h"
#include "framework/device/cuda/cuda_device.h"
#include "framework/device/cuda/dtype_dispatch.h"
#include "ops/nn/cuda_kernels.h"
#include "ops/nn/linear/int_linear_cuda.h"
#include "ops/nn/linear/linear_gemm_cuda.h"

namespace mg {

namespace {

constexpr size_t kAlign = 256;

size_t aligned(size_t bytes) {
  return (bytes + kAlign - 1) / kAlign * kAlign;
}

// The zero in code units of every group, after the signed codes are shifted to unsigned ones
// (int_linear_cuda.h): u = q + 2^(bits-1).
float effective_zero(const WeightQuantization& quant, const float* zero, int64_t i) {
  const float mid = static_cast<float>(1 << (quant_element_bits(quant.element) - 1));
  if (quant_element_signed(quant.element)) return mid + (zero != nullptr ? zero[i] : 0.0f);
  return zero != nullptr ? zero[i] : mid;
}

}  // namespace

IntLinearCudaLayout int_linear_cuda_layout(const Tensor& codes, const WeightQuantization& quant) {
  MG_ASSERT(codes.device().is_cpu() && quant.is_integer() && quant.logical_shape.size() == 2 &&
                codes.shape() == int_codes_shape(quant.element, quant.logical_shape),
            "int linear layout: {} codes {} for logical {}", quant_element_name(quant.element),
            codes.str(), shape_str(quant.logical_shape));
  const int64_t out = quant.logical_shape[0], groups = quant.scale.dim(1);
  const int bits = quant_element_bits(quant.element);
  IntLinearCudaLayout layout;
  // Codes: the canonical rows with the top bit of every signed code flipped (q -> q + 2^(b-1)).
  layout.codes = Tensor::empty_cpu(DType::kU8, codes.shape());
  const auto* src = static_cast<const uint8_t*>(codes.raw());
  auto* dst = static_cast<uint8_t*>(layout.codes.raw());
  const uint8_t flip = !quant_element_signed(quant.element) ? 0x00 : (bits == 4 ? 0x88 : 0x80);
  for (int64_t i = 0; i < codes.numel(); ++i) dst[i] = src[i] ^ flip;
  // {s, 2^23 + z} per row and group.
  layout.params = Tensor::empty_cpu(DType::kF32, {out, groups, 2});
  const float* scale = quant.scale.data<float>();
  const float* zero = quant.zero_point.defined() ? quant.zero_point.data<float>() : nullptr;
  float* params = layout.params.data<float>();
  for (int64_t i = 0; i < out * groups; ++i) {
    params[2 * i] = scale[i];
    params[2 * i + 1] = 8388608.0f + effective_zero(quant, zero, i);
  }
  return layout;
}

namespace {

class LinearIntCudaKernel final : public OpKernel {
 public:
  LinearIntCudaKernel(const KernelContext& ctx, DType dtype, const WeightQuantization& quant,
                      bool has_bias, float scale)
      : dtype_(dtype),
        element_(quant.element),
        group_(quant.group),
        has_zero_points_(quant.zero_point.defined()),
        scale_(scale) {
    const Device device = ctx.options.device;
    const int64_t out = quant.logical_shape[0], in = quant.logical_shape[1];
    const int bits = quant_element_bits(quant.element);
    const int64_t groups = quant.scale.dim(1);
    const IntLinearCudaLayout layout =
        int_linear_cuda_layout(to_host_tensor(ctx.weights[1]), quant);
    codes_ = to_device_tensor(layout.codes, device);
    params_ = to_device_tensor(layout.params, device);

    if (has_bias) {
      // bias * scale, rounded once to the compute dtype (as the BF16 linear's epilogue bias).
      Tensor f32 = to_f32_cpu(to_host_tensor(ctx.weights[2]));
      for (int64_t i = 0; i < f32.numel(); ++i) f32.data<float>()[i] *= scale;
      bias_ = to_device_tensor(cast_cpu(f32, dtype), device);
    }

    w_.codes = static_cast<const uint8_t*>(codes_.raw());
    w_.params = static_cast<const float2*>(params_.raw());
    w_.in = in;
    w_.out = out;
    w_.row_bytes = int_codes_row_bytes(quant.element, in);
    w_.groups = groups;
    w_.bits = bits;
    // One group (channel-wise, or a group wider than the row): 2^30 columns, so k >> 30 = 0.
    w_.group_cols = groups == 1 ? int64_t{1} << 30 : quant.group.cols_in(in);
    w_.group_shift = -1;
    for (int shift = 0; shift < 31; ++shift) {
      if (w_.group_cols == int64_t{1} << shift) w_.group_shift = shift;
    }
    gemm_ = std::make_unique<cuda::GemmXwt>(dtype, in, out, bias_.defined() ? bias_.raw() : nullptr,
                                            device.index);
    gemm_->set_gemv_max_rows(0);  // only ever called above kIntGemvMaxRows rows
  }

  // inputs: x [T, in], weight (codes; the kernel uses its own), bias (ditto). outputs: y [T, out].
  void run(const ExecContext& ctx, std::span<const Tensor> inputs,
           std::span<const Tensor> outputs) override {
    const Tensor& x = inputs[0];
    const int64_t tokens = x.dim(0);
    MG_ASSERT(x.dtype() == dtype_ && outputs[0].dtype() == dtype_ && x.dim(1) == w_.in &&
                  outputs[0].dim(1) == w_.out,
              "linear: x {} y {}, integer kernel built for {} [*, {}] -> [*, {}]", x.str(),
              outputs[0].str(), dtype_name(dtype_), w_.in, w_.out);
    if (tokens == 0) return;
    const cudaStream_t stream = cuda::native(ctx.stream);
    if (tokens <= cuda::kIntGemvMaxRows) {
      cuda::IntGemvArgs args;
      args.x = x.raw();
      args.bias = bias_.defined() ? bias_.raw() : nullptr;
      args.y = outputs[0].raw();
      args.rows = tokens;
      args.alpha = scale_;
      cuda::dispatch_16bit_dtype(dtype_, "linear: integer kernel", [&](auto tag) {
        cuda::launch_int_gemv<decltype(tag)>(w_, args, stream);
      });
      return;
    }
    const size_t weight_bytes = aligned(dequantized_bytes());
    MG_ASSERT(ctx.workspace_bytes >= weight_bytes + cuda::GemmXwt::kWorkspaceBytes,
              "linear: integer kernel workspace of {} bytes for {} tokens, need {}",
              ctx.workspace_bytes, tokens, weight_bytes + cuda::GemmXwt::kWorkspaceBytes);
    void* w = ctx.workspace;
    cuda::dispatch_16bit_dtype(dtype_, "linear: integer kernel", [&](auto tag) {
      cuda::launch_int_dequant<decltype(tag)>(w_, w, stream);
    });
    gemm_->run(x.raw(), tokens, w, outputs[0].raw(), scale_,
               static_cast<std::byte*>(ctx.workspace) + weight_bytes,
               ctx.workspace_bytes - weight_bytes, stream);
  }

  // Nothing for decode-only plans; the dequantized weight and cuBLASLt's scratch otherwise.
  size_t workspace_bytes(int64_t max_tokens) const override {
    if (max_tokens <= cuda::kIntGemvMaxRows) return 0;
    return aligned(dequantized_bytes()) + cuda::GemmXwt::kWorkspaceBytes;
  }

  std::string describe() const override {
    const std::string groups =
        w_.groups == 1 ? std::string("per channel") : fmt::format("group {}", group_.cols);
    return fmt::format(
        "cuda {} weight-only -> {} ({}{}; up to {} rows one GEMV on the packed codes{}, more "
        "rows dequantized into the workspace then {})",
        quant_element_name(element_), dtype_name(dtype_), groups,
        has_zero_points_ ? ", zero points" : "", cuda::kIntGemvMaxRows,
        cuda::int_gemv_vectorized(w_) ? ", 16-byte loads" : ", one code at a time",
        gemm_->describe());
  }

 private:
  size_t dequantized_bytes() const {
    return static_cast<size_t>(w_.out * w_.in) * dtype_size(dtype_);
  }

  DType dtype_;
  QuantElement element_;
  GroupShape group_;
  bool has_zero_points_;
  float scale_;
  Tensor codes_;   // U8 [out, row_bytes] unsigned codes on the device
  Tensor params_;  // F32 [out, groups, 2] {scale, 2^23 + zero} on the device
  Tensor bias_;    // [out] * scale in the compute dtype, or undefined
  cuda::IntLinearWeights w_;
  std::unique_ptr<cuda::GemmXwt> gemm_;
};

}  // namespace

std::string linear_int_cuda_refusal(const KernelContext& ctx, const WeightQuantization& quant) {
  const DType dtype = activation_dtype_of(ctx.options);
  if (dtype != DType::kBF16 && dtype != DType::kF16) {
    return fmt::format("the integer GEMV is built for BF16 and F16 activations, not {}",
                       dtype_name(dtype));
  }
  if (quant.g_idx.defined()) {
    return "act-order g_idx (GPTQ desc_act): groups are not runs of columns";
  }
  const Shape& logical = quant.logical_shape;
  MG_ASSERT(logical.size() == 2 && ctx.weights.size() > 1 &&
                ctx.weights[1].shape() == int_codes_shape(quant.element, logical) &&
                quant.scale.dtype() == DType::kF32 && quant.scale.device().is_cpu(),
            "linear: {} codes {} for logical {}, scale {}", quant_element_name(quant.element),
            ctx.weights[1].str(), shape_str(logical), quant.scale.str());
  const int64_t out = logical[0], in = logical[1];
  if (in >= (int64_t{1} << 30)) return fmt::format("{} input features (at most 2^30)", in);
  const int64_t g = quant.group.cols_in(in);
  const int64_t groups = (in + g - 1) / g;
  if (quant.group.rows != 1 || quant.scale.shape() != Shape{out, groups}) {
    return fmt::format("scales {} for group {} (one per row and group of columns)",
                       quant.scale.str(), quant.group.str());
  }
  if (quant.zero_point.defined()) {
    MG_ASSERT(quant.zero_point.shape() == quant.scale.shape() &&
                  quant.zero_point.dtype() == DType::kF32 && quant.zero_point.device().is_cpu(),
              "linear: zero points {} for scales {}", quant.zero_point.str(), quant.scale.str());
    const float* z = quant.zero_point.data<float>();
    for (int64_t i = 0; i < quant.zero_point.numel(); ++i) {
      const float e = effective_zero(quant, z, i);
      // 2^23 + z must be exact (int_linear_cuda.h): an integer well inside the float's range.
      if (!(std::fabs(e) < 4194304.0f) || e != std::floor(e)) {
        return fmt::format("zero point {} is not an integer (group {} of row {})", z[i], i % groups,
                           i / groups);
      }
    }
  }
  return "";
}

std::unique_ptr<OpKernel> make_linear_int_cuda_kernel(const KernelContext& ctx, bool has_bias,
                                                      float scale,
                                                      const WeightQuantization& quant) {
  MG_ASSERT(ctx.weights.size() > 1 && ctx.weights[1].defined(),
            "linear: CUDA kernel built without its weight");
  MG_ASSERT(!has_bias || (ctx.weights.size() > 2 && ctx.weights[2].defined()),
            "linear: CUDA kernel built without its bias");
  return std::make_unique<LinearIntCudaKernel>(ctx, activation_dtype_of(ctx.options), quant,
                                               has_bias, scale);
}

void log_int_dequantize_fallback_once(const std::string& reason) {
  static std::mutex mutex;
  static std::set<std::string> logged;
  std::lock_guard<std::mutex> lock(mutex);
  if (!logged.insert(reason).second) return;
  MG_LOG_WARN("compile",
              "linear: integer weight-only codes dequantized once at build on CUDA (the weight "
              "takes the activation dtype's memory and bandwidth) where the packed-code kernel "
              "does not take them: {}",
              reason);
}

}  // namespace mg
