// The CUDA gated_mlp kernel: g = x gateᵀ and u = x upᵀ (two cuBLASLt GEMMs into the workspace),
// g = act(g) * u (launch_gated_act), out = g downᵀ.
//
// Workspace: [cuBLASLt scratch | g [T, I] | u [T, I]], each part 256-byte aligned.
#include "framework/device/cuda/cuda_device.h"
#include "framework/device/cuda/dtype_dispatch.h"
#include "ops/nn/cuda_kernels.h"
#include "ops/nn/gated_mlp/gated_mlp_cuda.h"
#include "ops/nn/linear/linear_gemm_cuda.h"

namespace mg {

namespace {

constexpr size_t kAlign = 256;

size_t aligned(size_t bytes) {
  return (bytes + kAlign - 1) / kAlign * kAlign;
}

cuda::GatedActivation gated_activation_of(proto::Activation activation) {
  if (activation == proto::SILU_GATED) return cuda::GatedActivation::kSilu;
  if (activation == proto::GELU_GATED) return cuda::GatedActivation::kGeluErf;
  MG_ASSERT(activation == proto::GELU_TANH_GATED, "gated_mlp: unchecked activation {}",
            static_cast<int>(activation));
  return cuda::GatedActivation::kGeluTanh;
}

class GatedMlpCudaKernel final : public OpKernel {
 public:
  GatedMlpCudaKernel(DType dtype, cuda::GatedActivation activation, int64_t hidden,
                     int64_t intermediate, int device)
      : dtype_(dtype),
        activation_(activation),
        intermediate_(intermediate),
        up_proj_(dtype, hidden, intermediate, nullptr, device),
        down_proj_(dtype, intermediate, hidden, nullptr, device) {}

  // inputs: x [T, H], gate [I, H], up [I, H], down [H, I]. outputs: out [T, H].
  void run(const ExecContext& ctx, std::span<const Tensor> inputs,
           std::span<const Tensor> outputs) override {
    const Tensor& x = inputs[0];
    const int64_t tokens = x.dim(0);
    for (const Tensor* t : {&inputs[0], &inputs[1], &inputs[2], &inputs[3], &outputs[0]}) {
      MG_ASSERT(t->dtype() == dtype_, "gated_mlp: operand {}, kernel built for {}", t->str(),
                dtype_name(dtype_));
    }
    MG_ASSERT(ctx.workspace_bytes >= workspace_bytes(tokens),
              "gated_mlp: workspace of {} bytes, need {}", ctx.workspace_bytes,
              workspace_bytes(tokens));
    char* ws = static_cast<char*>(ctx.workspace);
    const size_t rows_bytes =
        aligned(static_cast<size_t>(tokens * intermediate_) * dtype_size(dtype_));
    void* gemm_ws = ws;
    void* g = ws + cuda::GemmXwt::kWorkspaceBytes;
    void* u = ws + cuda::GemmXwt::kWorkspaceBytes + rows_bytes;
    cudaStream_t stream = cuda::native(ctx.stream);
    const size_t gemm_bytes = cuda::GemmXwt::kWorkspaceBytes;
    // gate and up have the same shape, so one GemmXwt (one set of cached algorithms) serves both.
    up_proj_.run(x.raw(), tokens, inputs[1].raw(), g, 1.0f, gemm_ws, gemm_bytes, stream);
    up_proj_.run(x.raw(), tokens, inputs[2].raw(), u, 1.0f, gemm_ws, gemm_bytes, stream);
    cuda::GatedActArgs act;
    act.g = g;
    act.u = u;
    act.n = tokens * intermediate_;
    cuda::dispatch_float_dtype(
        dtype_, [&](auto tag) { cuda::launch_gated_act<decltype(tag)>(activation_, act, stream); });
    down_proj_.run(g, tokens, inputs[3].raw(), outputs[0].raw(), 1.0f, gemm_ws, gemm_bytes, stream);
  }

  size_t workspace_bytes(int64_t max_tokens) const override {
    return cuda::GemmXwt::kWorkspaceBytes +
           2 * aligned(static_cast<size_t>(max_tokens * intermediate_) * dtype_size(dtype_));
  }

  std::string describe() const override {
    return fmt::format("cuda {} + fused gated activation", up_proj_.describe());
  }

 private:
  DType dtype_;
  cuda::GatedActivation activation_;
  int64_t intermediate_;
  cuda::GemmXwt up_proj_;    // [T, H] x [I, H]ᵀ: gate and up
  cuda::GemmXwt down_proj_;  // [T, I] x [H, I]ᵀ
};

}  // namespace

std::unique_ptr<OpKernel> make_gated_mlp_cuda_kernel(const KernelContext& ctx,
                                                     proto::Activation activation,
                                                     int64_t intermediate) {
  MG_ASSERT(ctx.input_types.size() > 0 && ctx.input_types[0].has_value(),
            "gated_mlp: kernel built without the type of x");
  const int64_t hidden = ctx.input_types[0]->shape[1];
  return std::make_unique<GatedMlpCudaKernel>(activation_dtype_of(ctx.options),
                                              gated_activation_of(activation), hidden, intermediate,
                                              ctx.options.device.index);
}

}  // namespace mg
