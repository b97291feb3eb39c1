// The CUDA attn_temperature kernel: adapter from the op's tensors to launch_attn_temperature.
#include "framework/device/cuda/cuda_device.h"
#include "framework/device/cuda/dtype_dispatch.h"
#include "ops/nn/attn_temperature/attn_temperature_cuda.h"
#include "ops/nn/cuda_kernels.h"

namespace mg {

namespace {

class AttnTemperatureCudaKernel final : public OpKernel {
 public:
  AttnTemperatureCudaKernel(DType dtype, float attn_scale, float floor_scale) : dtype_(dtype) {
    args_.attn_scale = attn_scale;
    args_.floor_scale = floor_scale;
  }

  // inputs: x [T, D], positions [T] I32. outputs: out [T, D].
  void run(const ExecContext& ctx, std::span<const Tensor> inputs,
           std::span<const Tensor> outputs) override {
    MG_ASSERT(inputs[0].dtype() == dtype_ && outputs[0].dtype() == dtype_,
              "attn_temperature: x {} out {}, kernel built for {}", inputs[0].str(),
              outputs[0].str(), dtype_name(dtype_));
    cuda::AttnTemperatureArgs args = args_;
    args.x = inputs[0].raw();
    args.out = outputs[0].raw();
    args.positions = static_cast<const int32_t*>(inputs[1].raw());
    args.tokens = inputs[0].dim(0);
    args.dim = inputs[0].dim(1);
    cuda::dispatch_float_dtype(dtype_, [&](auto tag) {
      cuda::launch_attn_temperature<decltype(tag)>(args, cuda::native(ctx.stream));
    });
  }

  std::string describe() const override { return fmt::format("cuda {}", dtype_name(dtype_)); }

 private:
  DType dtype_;
  cuda::AttnTemperatureArgs args_;  // the params; pointers and sizes are set per call
};

}  // namespace

std::unique_ptr<OpKernel> make_attn_temperature_cuda_kernel(const KernelContext& ctx,
                                                            float attn_scale, float floor_scale) {
  return std::make_unique<AttnTemperatureCudaKernel>(activation_dtype_of(ctx.options), attn_scale,
                                                     floor_scale);
}

}  // namespace mg
