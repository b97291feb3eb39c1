// The CUDA clamp kernel: adapter from the op's tensors to launch_clamp.
#include "framework/device/cuda/cuda_device.h"
#include "framework/device/cuda/dtype_dispatch.h"
#include "ops/nn/clamp/clamp_cuda.h"
#include "ops/nn/cuda_kernels.h"

namespace mg {

namespace {

class ClampCudaKernel final : public OpKernel {
 public:
  ClampCudaKernel(DType dtype, float min, float max) : dtype_(dtype), min_(min), max_(max) {}

  // inputs: x [T, D]. outputs: out [T, D].
  void run(const ExecContext& ctx, std::span<const Tensor> inputs,
           std::span<const Tensor> outputs) override {
    MG_ASSERT(inputs[0].dtype() == dtype_ && outputs[0].dtype() == dtype_,
              "clamp: x {} out {}, kernel built for {}", inputs[0].str(), outputs[0].str(),
              dtype_name(dtype_));
    cuda::ClampArgs args;
    args.x = inputs[0].raw();
    args.out = outputs[0].raw();
    args.n = outputs[0].numel();
    args.lo = min_;
    args.hi = max_;
    cuda::dispatch_float_dtype(dtype_, [&](auto tag) {
      cuda::launch_clamp<decltype(tag)>(args, cuda::native(ctx.stream));
    });
  }

  std::string describe() const override { return fmt::format("cuda {}", dtype_name(dtype_)); }

 private:
  DType dtype_;
  float min_;  // -inf when unset
  float max_;  // +inf when unset
};

}  // namespace

std::unique_ptr<OpKernel> make_clamp_cuda_kernel(const KernelContext& ctx, float min, float max) {
  return std::make_unique<ClampCudaKernel>(activation_dtype_of(ctx.options), min, max);
}

}  // namespace mg
