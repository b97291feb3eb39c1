// The CUDA add_rms_norm kernel: adapter from the op's tensors to launch_add_rms_norm.
#include "ops/nn/add_rms_norm/add_rms_norm_cuda_kernel.h"
#include "framework/device/cuda/cuda_device.h"
#include "framework/device/cuda/dtype_dispatch.h"
#include "ops/nn/add_rms_norm/add_rms_norm_cuda.h"

namespace mg {

namespace {

class AddRmsNormCudaKernel final : public OpKernel {
 public:
  AddRmsNormCudaKernel(DType dtype, float eps) : dtype_(dtype), eps_(eps) {}

  // inputs: a, b [T, D], weight [D] (optional). outputs: sum, y [T, D].
  void run(const ExecContext& ctx, std::span<const Tensor> inputs,
           std::span<const Tensor> outputs) override {
    const bool has_weight = inputs.size() > 2 && inputs[2].defined();
    MG_ASSERT(inputs[0].dtype() == dtype_ && inputs[1].dtype() == dtype_ &&
                  outputs[0].dtype() == dtype_ && outputs[1].dtype() == dtype_ &&
                  (!has_weight || inputs[2].dtype() == dtype_),
              "add_rms_norm: a {} b {} sum {} y {}, kernel built for {}", inputs[0].str(),
              inputs[1].str(), outputs[0].str(), outputs[1].str(), dtype_name(dtype_));
    cuda::AddRmsNormArgs args;
    args.a = inputs[0].raw();
    args.b = inputs[1].raw();
    args.weight = has_weight ? inputs[2].raw() : nullptr;
    args.sum = outputs[0].raw();
    args.y = outputs[1].raw();
    args.rows = inputs[0].dim(0);
    args.dim = inputs[0].dim(1);
    args.eps = eps_;
    cuda::dispatch_float_dtype(dtype_, [&](auto tag) {
      cuda::launch_add_rms_norm<decltype(tag)>(args, cuda::native(ctx.stream));
    });
  }

  std::string describe() const override { return fmt::format("cuda {}", dtype_name(dtype_)); }

 private:
  DType dtype_;
  float eps_;
};

}  // namespace

std::unique_ptr<OpKernel> make_add_rms_norm_cuda_kernel(const KernelContext& ctx, float eps) {
  return std::make_unique<AddRmsNormCudaKernel>(activation_dtype_of(ctx.options), eps);
}

}  // namespace mg
