// The CUDA embedding kernel: adapter from the op's tensors to launch_embedding.
#include "framework/device/cuda/cuda_device.h"
#include "framework/device/cuda/dtype_dispatch.h"
#include "ops/nn/cuda_kernels.h"
#include "ops/nn/embedding/embedding_cuda.h"

namespace mg {

namespace {

class EmbeddingCudaKernel final : public OpKernel {
 public:
  EmbeddingCudaKernel(DType dtype, float scale) : dtype_(dtype), scale_(scale) {}

  // inputs: token_ids [T] I32, table [V, H]. outputs: out [T, H].
  void run(const ExecContext& ctx, std::span<const Tensor> inputs,
           std::span<const Tensor> outputs) override {
    const Tensor& table = inputs[1];
    MG_ASSERT(table.dtype() == dtype_ && outputs[0].dtype() == dtype_,
              "embedding: table {} out {}, kernel built for {}", table.str(), outputs[0].str(),
              dtype_name(dtype_));
    cuda::EmbeddingArgs args;
    args.token_ids = static_cast<const int32_t*>(inputs[0].raw());
    args.table = table.raw();
    args.out = outputs[0].raw();
    args.tokens = inputs[0].dim(0);
    args.vocab = table.dim(0);
    args.hidden = table.dim(1);
    args.scale = scale_;
    cuda::dispatch_float_dtype(dtype_, [&](auto tag) {
      cuda::launch_embedding<decltype(tag)>(args, cuda::native(ctx.stream));
    });
  }

  std::string describe() const override { return fmt::format("cuda {}", dtype_name(dtype_)); }

 private:
  DType dtype_;
  float scale_;
};

}  // namespace

std::unique_ptr<OpKernel> make_embedding_cuda_kernel(const KernelContext& ctx, float scale) {
  return std::make_unique<EmbeddingCudaKernel>(activation_dtype_of(ctx.options), scale);
}

}  // namespace mg
