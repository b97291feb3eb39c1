// The CUDA qk_norm_rope kernel: adapter from the op's tensors to launch_qk_norm_rope. The scaled
// frequencies (rope_inv_freq, fp64) are computed on the host and uploaded once when the kernel
// is built, as the rope op's kernel does.
#include "ops/nn/qk_norm_rope/qk_norm_rope_cuda_kernel.h"

#include "framework/device/allocator.h"
#include "framework/device/cuda/cuda_device.h"
#include "framework/device/cuda/dtype_dispatch.h"
#include "ops/nn/qk_norm_rope/qk_norm_rope_cuda.h"
#include "ops/nn/rope/rope.h"

namespace mg {

namespace {

class QkNormRopeCudaKernel final : public OpKernel {
 public:
  QkNormRopeCudaKernel(DType dtype, const proto::QkNormRopeParams& p, Device device)
      : dtype_(dtype) {
    const proto::RopeParams& rope = p.rope();
    args_.q_heads = rope.num_heads();
    args_.k_heads = p.num_kv_heads();
    args_.head_dim = rope.head_dim();
    args_.rotary_dim = rope_rotary_dim(rope);
    args_.rotary_offset = rope.rotary_offset();
    args_.interleaved = rope.pairing() == proto::INTERLEAVED;
    args_.attention_factor = rope_attention_factor(rope);
    args_.q_norm = p.has_q_norm();
    args_.k_norm = p.has_k_norm();
    args_.q_eps = p.q_norm().eps();
    args_.k_eps = p.k_norm().eps();
    std::vector<double> inv_freq = rope_inv_freq(rope);
    if (!inv_freq.empty()) {
      const Tensor host =
          Tensor::wrap(inv_freq.data(), DType::kF64, {static_cast<int64_t>(inv_freq.size())});
      inv_freq_ = empty_tensor(device, DType::kF64, host.shape());
      copy_tensor(inv_freq_, host);  // blocking: `inv_freq` dies with this constructor
      args_.inv_freq = static_cast<const double*>(inv_freq_.raw());
    }
  }

  // inputs: q [T, Hq * D], k [T, Hk * D], positions [T] I32, q_weight, k_weight [D] (optional).
  // outputs: q_out, k_out shaped as q, k.
  void run(const ExecContext& ctx, std::span<const Tensor> inputs,
           std::span<const Tensor> outputs) override {
    const bool q_weight = inputs.size() > 3 && inputs[3].defined();
    const bool k_weight = inputs.size() > 4 && inputs[4].defined();
    MG_ASSERT(inputs[0].dtype() == dtype_ && inputs[1].dtype() == dtype_ &&
                  outputs[0].dtype() == dtype_ && outputs[1].dtype() == dtype_ &&
                  (!q_weight || inputs[3].dtype() == dtype_) &&
                  (!k_weight || inputs[4].dtype() == dtype_),
              "qk_norm_rope: q {} k {} q_out {} k_out {}, kernel built for {}", inputs[0].str(),
              inputs[1].str(), outputs[0].str(), outputs[1].str(), dtype_name(dtype_));
    cuda::QkNormRopeArgs args = args_;
    args.q = inputs[0].raw();
    args.k = inputs[1].raw();
    args.positions = static_cast<const int32_t*>(inputs[2].raw());
    args.q_weight = q_weight ? inputs[3].raw() : nullptr;
    args.k_weight = k_weight ? inputs[4].raw() : nullptr;
    args.q_out = outputs[0].raw();
    args.k_out = outputs[1].raw();
    args.tokens = inputs[0].dim(0);
    cuda::dispatch_float_dtype(dtype_, [&](auto tag) {
      cuda::launch_qk_norm_rope<decltype(tag)>(args, cuda::native(ctx.stream));
    });
  }

  std::string describe() const override { return fmt::format("cuda {}", dtype_name(dtype_)); }

 private:
  DType dtype_;
  cuda::QkNormRopeArgs args_;  // everything but the per-call pointers and token count
  Tensor inv_freq_;            // F64 [rotary_dim / 2] on the device
};

}  // namespace

std::unique_ptr<OpKernel> make_qk_norm_rope_cuda_kernel(const KernelContext& ctx,
                                                        const proto::QkNormRopeParams& params) {
  return std::make_unique<QkNormRopeCudaKernel>(activation_dtype_of(ctx.options), params,
                                                ctx.options.device);
}

}  // namespace mg
