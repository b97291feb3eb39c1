// The CUDA concat_heads kernel: adapter from the op's tensors to launch_concat_heads.
#include "framework/device/cuda/cuda_device.h"
#include "framework/device/cuda/dtype_dispatch.h"
#include "ops/nn/concat_heads/concat_heads_cuda.h"
#include "ops/nn/cuda_kernels.h"

namespace mg {

namespace {

class ConcatHeadsCudaKernel final : public OpKernel {
 public:
  ConcatHeadsCudaKernel(DType dtype, const proto::ConcatHeadsParams& p, int64_t b_heads)
      : dtype_(dtype) {
    args_.heads = p.num_heads();
    args_.a_dim = p.a_head_dim();
    args_.b_heads = b_heads;
    args_.b_dim = p.b_head_dim();
  }

  // inputs: a [T, n * da], b [T, m * db]. outputs: out [T, n * (da + db)].
  void run(const ExecContext& ctx, std::span<const Tensor> inputs,
           std::span<const Tensor> outputs) override {
    MG_ASSERT(
        inputs[0].dtype() == dtype_ && inputs[1].dtype() == dtype_ && outputs[0].dtype() == dtype_,
        "concat_heads: a {} b {} out {}, kernel built for {}", inputs[0].str(), inputs[1].str(),
        outputs[0].str(), dtype_name(dtype_));
    cuda::ConcatHeadsArgs args = args_;
    args.a = inputs[0].raw();
    args.b = inputs[1].raw();
    args.out = outputs[0].raw();
    args.tokens = inputs[0].dim(0);
    cuda::dispatch_float_dtype(dtype_, [&](auto tag) {
      cuda::launch_concat_heads<decltype(tag)>(args, cuda::native(ctx.stream));
    });
  }

  std::string describe() const override { return fmt::format("cuda {}", dtype_name(dtype_)); }

 private:
  DType dtype_;
  cuda::ConcatHeadsArgs args_;  // everything but the per-call pointers and token count
};

}  // namespace

std::unique_ptr<OpKernel> make_concat_heads_cuda_kernel(const KernelContext& ctx,
                                                        const proto::ConcatHeadsParams& params,
                                                        int64_t b_heads) {
  return std::make_unique<ConcatHeadsCudaKernel>(activation_dtype_of(ctx.options), params, b_heads);
}

}  // namespace mg
