// The CUDA add kernel: adapter from the op's tensors to launch_add.
#include "framework/device/cuda/cuda_device.h"
#include "framework/device/cuda/dtype_dispatch.h"
#include "ops/nn/add/add_cuda.h"
#include "ops/nn/cuda_kernels.h"

namespace mg {

namespace {

class AddCudaKernel final : public OpKernel {
 public:
  AddCudaKernel(DType dtype, float scale) : dtype_(dtype), scale_(scale) {}

  // inputs: a, b [T, ...]. outputs: out [T, ...].
  void run(const ExecContext& ctx, std::span<const Tensor> inputs,
           std::span<const Tensor> outputs) override {
    MG_ASSERT(
        inputs[0].dtype() == dtype_ && inputs[1].dtype() == dtype_ && outputs[0].dtype() == dtype_,
        "add: a {} b {} out {}, kernel built for {}", inputs[0].str(), inputs[1].str(),
        outputs[0].str(), dtype_name(dtype_));
    cuda::AddArgs args;
    args.a = inputs[0].raw();
    args.b = inputs[1].raw();
    args.out = outputs[0].raw();
    args.n = outputs[0].numel();
    args.scale = scale_;
    cuda::dispatch_float_dtype(
        dtype_, [&](auto tag) { cuda::launch_add<decltype(tag)>(args, cuda::native(ctx.stream)); });
  }

  std::string describe() const override { return fmt::format("cuda {}", dtype_name(dtype_)); }

 private:
  DType dtype_;
  float scale_;
};

}  // namespace

std::unique_ptr<OpKernel> make_add_cuda_kernel(const KernelContext& ctx, float scale) {
  return std::make_unique<AddCudaKernel>(activation_dtype_of(ctx.options), scale);
}

}  // namespace mg
