// The CUDA rms_norm kernel: adapter from the op's tensors to launch_rms_norm.
#include "framework/device/cuda/cuda_device.h"
#include "framework/device/cuda/dtype_dispatch.h"
#include "ops/nn/cuda_kernels.h"
#include "ops/nn/rms_norm/rms_norm_cuda.h"

namespace mg {

namespace {

class RmsNormCudaKernel final : public OpKernel {
 public:
  RmsNormCudaKernel(DType dtype, int64_t group_size, float eps)
      : dtype_(dtype), group_size_(group_size), eps_(eps) {}

  // inputs: x [T, D], weight [G] (optional). outputs: y [T, D].
  void run(const ExecContext& ctx, std::span<const Tensor> inputs,
           std::span<const Tensor> outputs) override {
    const Tensor& x = inputs[0];
    const bool has_weight = inputs.size() > 1 && inputs[1].defined();
    MG_ASSERT(x.dtype() == dtype_ && outputs[0].dtype() == dtype_ &&
                  (!has_weight || inputs[1].dtype() == dtype_),
              "rms_norm: x {} y {}, kernel built for {}", x.str(), outputs[0].str(),
              dtype_name(dtype_));
    cuda::RmsNormArgs args;
    args.x = x.raw();
    args.weight = has_weight ? inputs[1].raw() : nullptr;
    args.y = outputs[0].raw();
    args.rows = x.dim(0);
    args.dim = x.dim(1);
    args.group = group_size_ == 0 ? args.dim : group_size_;
    args.eps = eps_;
    cuda::dispatch_float_dtype(dtype_, [&](auto tag) {
      cuda::launch_rms_norm<decltype(tag)>(args, cuda::native(ctx.stream));
    });
  }

  std::string describe() const override { return fmt::format("cuda {}", dtype_name(dtype_)); }

 private:
  DType dtype_;
  int64_t group_size_;  // 0: the whole row
  float eps_;
};

}  // namespace

std::unique_ptr<OpKernel> make_rms_norm_cuda_kernel(const KernelContext& ctx, int64_t group_size,
                                                    float eps) {
  return std::make_unique<RmsNormCudaKernel>(activation_dtype_of(ctx.options), group_size, eps);
}

}  // namespace mg
