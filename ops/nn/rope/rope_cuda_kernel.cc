// The CUDA rope kernel: adapter from the op's tensors to launch_rope. The scaled frequencies
// (rope_inv_freq, fp64) are computed on the host and uploaded once when the kernel is built.
#include "framework/device/allocator.h"
#include "framework/device/cuda/cuda_device.h"
#include "framework/device/cuda/dtype_dispatch.h"
#include "ops/nn/cuda_kernels.h"
#include "ops/nn/rope/rope.h"
#include "ops/nn/rope/rope_cuda.h"

namespace mg {

namespace {

class RopeCudaKernel final : public OpKernel {
 public:
  RopeCudaKernel(DType dtype, const proto::RopeParams& p, Device device) : dtype_(dtype) {
    args_.heads = p.num_heads();
    args_.head_dim = p.head_dim();
    args_.rotary_dim = rope_rotary_dim(p);
    args_.rotary_offset = p.rotary_offset();
    args_.interleaved = p.pairing() == proto::INTERLEAVED;
    args_.attention_factor = rope_attention_factor(p);
    std::vector<double> inv_freq = rope_inv_freq(p);
    if (!inv_freq.empty()) {
      const Tensor host =
          Tensor::wrap(inv_freq.data(), DType::kF64, {static_cast<int64_t>(inv_freq.size())});
      inv_freq_ = empty_tensor(device, DType::kF64, host.shape());
      copy_tensor(inv_freq_, host);  // blocking: `inv_freq` dies with this constructor
      args_.inv_freq = static_cast<const double*>(inv_freq_.raw());
    }
  }

  // inputs: x [T, heads * head_dim], positions [T] I32. outputs: out, same shape as x.
  void run(const ExecContext& ctx, std::span<const Tensor> inputs,
           std::span<const Tensor> outputs) override {
    MG_ASSERT(inputs[0].dtype() == dtype_ && outputs[0].dtype() == dtype_,
              "rope: x {} out {}, kernel built for {}", inputs[0].str(), outputs[0].str(),
              dtype_name(dtype_));
    cuda::RopeArgs args = args_;
    args.x = inputs[0].raw();
    args.out = outputs[0].raw();
    args.positions = static_cast<const int32_t*>(inputs[1].raw());
    args.tokens = inputs[0].dim(0);
    cuda::dispatch_float_dtype(dtype_, [&](auto tag) {
      cuda::launch_rope<decltype(tag)>(args, cuda::native(ctx.stream));
    });
  }

  std::string describe() const override { return fmt::format("cuda {}", dtype_name(dtype_)); }

 private:
  DType dtype_;
  cuda::RopeArgs args_;  // everything but the per-call pointers and token count
  Tensor inv_freq_;      // F64 [rotary_dim / 2] on the device
};

}  // namespace

std::unique_ptr<OpKernel> make_rope_cuda_kernel(const KernelContext& ctx,
                                                const proto::RopeParams& params) {
  return std::make_unique<RopeCudaKernel>(activation_dtype_of(ctx.options), params,
                                          ctx.options.device);
}

}  // namespace mg
