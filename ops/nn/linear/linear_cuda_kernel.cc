// The CUDA linear kernel: y = (x Wᵀ + b) * scale as one cuBLASLt GEMM (GemmXwt) with
// alpha = scale and the bias, pre-multiplied by scale when the kernel is built, in the epilogue.
#include "framework/device/allocator.h"
#include "framework/device/convert.h"
#include "framework/device/cuda/cuda_device.h"
#include "ops/nn/cuda_kernels.h"
#include "ops/nn/linear/linear_gemm_cuda.h"

namespace mg {

namespace {

// bias * scale, rounded once to the bias's dtype, as a new device tensor.
Tensor scaled_bias(const Tensor& bias, float scale) {
  Tensor host = Tensor::empty_cpu(bias.dtype(), bias.shape());
  copy_tensor(host, bias);
  Tensor f32 = to_f32_cpu(host);
  for (int64_t i = 0; i < f32.numel(); ++i) f32.data<float>()[i] *= scale;
  Tensor out = empty_tensor(bias.device(), bias.dtype(), bias.shape());
  copy_tensor(out, cast_cpu(f32, bias.dtype()));
  return out;
}

class LinearCudaKernel final : public OpKernel {
 public:
  LinearCudaKernel(DType dtype, int64_t in, int64_t out, Tensor bias, float scale, int device,
                   Tensor owned_weight)
      : dtype_(dtype),
        owned_weight_(std::move(owned_weight)),
        bias_(std::move(bias)),
        scale_(scale),
        gemm_(dtype, in, out, bias_.defined() ? bias_.raw() : nullptr, device) {}

  // inputs: x [T, in], weight [out, in], bias [out] (optional; the kernel uses its own scaled
  // copy). outputs: y [T, out].
  void run(const ExecContext& ctx, std::span<const Tensor> inputs,
           std::span<const Tensor> outputs) override {
    const Tensor& x = inputs[0];
    const Tensor& weight = owned_weight_.defined() ? owned_weight_ : inputs[1];
    MG_ASSERT(x.dtype() == dtype_ && weight.dtype() == dtype_ && outputs[0].dtype() == dtype_,
              "linear: x {} weight {} y {}, kernel built for {}", x.str(), weight.str(),
              outputs[0].str(), dtype_name(dtype_));
    gemm_.run(x.raw(), x.dim(0), weight.raw(), outputs[0].raw(), scale_, ctx.workspace,
              ctx.workspace_bytes, cuda::native(ctx.stream));
  }

  size_t workspace_bytes(int64_t max_tokens) const override {
    return cuda::GemmXwt::kWorkspaceBytes;
  }

  std::string describe() const override {
    return "cuda " + gemm_.describe() +
           (owned_weight_.defined() ? " (FP8 weight dequantized to " +
                                          std::string(dtype_name(dtype_)) + " at build: W8A16)"
                                    : "");
  }

 private:
  DType dtype_;
  Tensor owned_weight_;  // [out, in] on the device, or undefined
  Tensor bias_;          // [out] * scale, or undefined
  float scale_;
  cuda::GemmXwt gemm_;
};

}  // namespace

std::unique_ptr<OpKernel> make_linear_cuda_kernel(const KernelContext& ctx, bool has_bias,
                                                  float scale, Tensor owned_weight) {
  const DType dtype = activation_dtype_of(ctx.options);
  MG_ASSERT(owned_weight.defined() || (ctx.weights.size() > 1 && ctx.weights[1].defined()),
            "linear: CUDA kernel built without its weight");
  const Tensor& weight = owned_weight.defined() ? owned_weight : ctx.weights[1];
  Tensor bias;
  if (has_bias) {
    MG_ASSERT(ctx.weights.size() > 2 && ctx.weights[2].defined(),
              "linear: CUDA kernel built without its bias");
    bias = scale == 1.0f ? ctx.weights[2] : scaled_bias(ctx.weights[2], scale);
  }
  return std::make_unique<LinearCudaKernel>(dtype, weight.dim(1), weight.dim(0), std::move(bias),
                                            scale, ctx.options.device.index,
                                            std::move(owned_weight));
}

}  // namespace mg
