// The CUDA linear kernel: y = (x Wᵀ + b) * scale as one cuBLASLt GEMM (GemmXwt) with
// alpha = scale and the bias, pre-multiplied by scale when the kernel is built, in the epilogue.
// A linear with output_features (the fuse-ops pass's q/k/v, linear_fusion.cc) has one GemmXwt per
// output over its rows of the weight: where every one of them would take the GEMV (decode), the
// kernel launches one split GEMV for all (linear_gemv_cuda.h), which computes each output as its
// own GEMV would; otherwise (prefill) it runs them one after another, as the unfused linears did.
#include <algorithm>

#include "framework/device/allocator.h"
#include "framework/device/convert.h"
#include "framework/device/cuda/cuda_device.h"
#include "framework/device/cuda/dtype_dispatch.h"
#include "ops/nn/cuda_kernels.h"
#include "ops/nn/linear/linear.h"
#include "ops/nn/linear/linear_gemm_cuda.h"
#include "ops/nn/linear/linear_gemv_cuda.h"

namespace mg {

namespace {

// bias[first, first + n) * scale, rounded once to the bias's dtype, as a new device tensor.
Tensor scaled_bias(const Tensor& bias, int64_t first, int64_t n, float scale) {
  Tensor host = Tensor::empty_cpu(bias.dtype(), bias.shape());
  copy_tensor(host, bias);
  const Tensor f32 = to_f32_cpu(host);
  Tensor block = Tensor::empty_cpu(DType::kF32, {n});
  for (int64_t i = 0; i < n; ++i) block.data<float>()[i] = f32.data<float>()[first + i] * scale;
  Tensor out = empty_tensor(bias.device(), bias.dtype(), {n});
  copy_tensor(out, cast_cpu(block, bias.dtype()));
  return out;
}

// One output of the kernel: rows [first_row, first_row + out) of the weight.
struct OutputBlock {
  int64_t first_row = 0;
  int64_t out = 0;
  Tensor bias;  // [out] * scale on the device, or undefined; its own tensor, as unfused
  std::unique_ptr<cuda::GemmXwt> gemm;
};

class LinearCudaKernel final : public OpKernel {
 public:
  LinearCudaKernel(DType dtype, int64_t in, std::vector<OutputBlock> blocks, float scale,
                   Tensor owned_weight)
      : dtype_(dtype),
        in_(in),
        owned_weight_(std::move(owned_weight)),
        blocks_(std::move(blocks)),
        scale_(scale) {
    MG_ASSERT(!blocks_.empty() && blocks_.size() <= static_cast<size_t>(cuda::kGemvMaxBlocks),
              "linear: {} output blocks", blocks_.size());
    // One split GEMV when every block takes the GEMV: up to kGemvSplitChosenRows rows
    // (linear_gemv_cuda.h), or more where every block's own rule goes further.
    int64_t least_block_rows = cuda::kGemvMaxRows;
    for (const OutputBlock& b : blocks_) {
      least_block_rows = std::min(least_block_rows, b.gemm->gemv_rows());
    }
    split_gemv_rows_ = blocks_.size() > 1 && least_block_rows > 0
                           ? std::max(least_block_rows, cuda::kGemvSplitChosenRows)
                           : 0;
  }

  // inputs: x [T, in], weight [out, in], bias [out] (optional; the kernel uses its own scaled
  // copies). outputs: one [T, out_b] per block (y [T, out] without output_features).
  void run(const ExecContext& ctx, std::span<const Tensor> inputs,
           std::span<const Tensor> outputs) override {
    const Tensor& x = inputs[0];
    const Tensor& weight = owned_weight_.defined() ? owned_weight_ : inputs[1];
    MG_ASSERT(x.dtype() == dtype_ && weight.dtype() == dtype_ && outputs.size() == blocks_.size(),
              "linear: x {} weight {}, {} outputs; kernel built for {}, {} blocks", x.str(),
              weight.str(), outputs.size(), dtype_name(dtype_), blocks_.size());
    const int64_t tokens = x.dim(0);
    if (tokens <= split_gemv_rows_) {
      cuda::GemvSplitArgs args;
      args.x = x.raw();
      args.w = weight.raw();
      args.rows = tokens;
      args.in = in_;
      args.alpha = scale_;
      args.num_blocks = static_cast<int>(blocks_.size());
      for (size_t b = 0; b < blocks_.size(); ++b) {
        args.blocks[b].y = outputs[b].raw();
        args.blocks[b].bias = blocks_[b].bias.defined() ? blocks_[b].bias.raw() : nullptr;
        args.blocks[b].out = blocks_[b].out;
      }
      cuda::dispatch_float_dtype(dtype_, [&](auto tag) {
        cuda::launch_gemv_split<decltype(tag)>(args, cuda::native(ctx.stream));
      });
      return;
    }
    const size_t row_bytes = static_cast<size_t>(in_) * dtype_size(dtype_);
    for (size_t b = 0; b < blocks_.size(); ++b) {
      MG_ASSERT(outputs[b].dtype() == dtype_ && outputs[b].dim(1) == blocks_[b].out,
                "linear: output {} is {}, block of {} rows", b, outputs[b].str(), blocks_[b].out);
      const void* w = static_cast<const uint8_t*>(weight.raw()) +
                      static_cast<size_t>(blocks_[b].first_row) * row_bytes;
      blocks_[b].gemm->run(x.raw(), tokens, w, outputs[b].raw(), scale_, ctx.workspace,
                           ctx.workspace_bytes, cuda::native(ctx.stream));
    }
  }

  size_t workspace_bytes(int64_t max_tokens) const override {
    return cuda::GemmXwt::kWorkspaceBytes;
  }

  std::string describe() const override {
    std::string s = "cuda " + blocks_[0].gemm->describe();
    if (blocks_.size() > 1) {
      std::vector<int64_t> widths;
      for (const OutputBlock& b : blocks_) widths.push_back(b.out);
      s += fmt::format(", {} outputs [{}] of one weight", blocks_.size(), fmt::join(widths, ", "));
      if (split_gemv_rows_ > 0) s += fmt::format(" (one GEMV up to {} rows)", split_gemv_rows_);
    }
    if (owned_weight_.defined()) {
      s += " (FP8 weight dequantized to " + std::string(dtype_name(dtype_)) + " at build: W8A16)";
    }
    return s;
  }

 private:
  DType dtype_;
  int64_t in_;
  Tensor owned_weight_;  // [out, in] on the device, or undefined
  std::vector<OutputBlock> blocks_;
  float scale_;
  int64_t split_gemv_rows_ = 0;  // rows up to which one split GEMV serves every block
};

}  // namespace

std::unique_ptr<OpKernel> make_linear_cuda_kernel(const KernelContext& ctx, bool has_bias,
                                                  float scale, Tensor owned_weight) {
  const DType dtype = activation_dtype_of(ctx.options);
  MG_ASSERT(owned_weight.defined() || (ctx.weights.size() > 1 && ctx.weights[1].defined()),
            "linear: CUDA kernel built without its weight");
  const Tensor& weight = owned_weight.defined() ? owned_weight : ctx.weights[1];
  MG_ASSERT(!has_bias || (ctx.weights.size() > 2 && ctx.weights[2].defined()),
            "linear: CUDA kernel built without its bias");
  const std::vector<int64_t> features = linear_output_features(ctx.node.linear(), weight.dim(0));
  std::vector<OutputBlock> blocks;
  int64_t row = 0;
  for (const int64_t out : features) {
    OutputBlock b;
    b.first_row = row;
    b.out = out;
    if (has_bias) {
      // One output: the bias weight itself where no scale applies (no copy).
      b.bias = features.size() == 1 && scale == 1.0f ? ctx.weights[2]
                                                     : scaled_bias(ctx.weights[2], row, out, scale);
    }
    b.gemm = std::make_unique<cuda::GemmXwt>(dtype, weight.dim(1), out,
                                             b.bias.defined() ? b.bias.raw() : nullptr,
                                             ctx.options.device.index);
    blocks.push_back(std::move(b));
    row += out;
  }
  MG_ASSERT(row == weight.dim(0), "linear: output blocks of {} rows, weight {}", row, weight.str());
  return std::make_unique<LinearCudaKernel>(dtype, weight.dim(1), std::move(blocks), scale,
                                            std::move(owned_weight));
}

}  // namespace mg
