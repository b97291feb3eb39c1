// op "linear": inputs (x [T, in], weight [out, in], bias [out] or "") -> y [T, out].
// y = (x Wᵀ + b) * scale. CPU kernel: cpu_gemm_xwt (Eigen, parallel over output features).
// FP8 weights (TensorInfo.quantization, docs/quantization.md) are taken as codes: the CPU kernel
// reads them through cpu_fp8_gemm_xwt and quantizes x per token group when the weight asks for it
// (W8A8, as HF's FP8Linear; or with the checkpoint's static scale); CUDA runs W8A8 on cuBLASLt's
// FP8 GEMM (linear_fp8_cuda_kernel.cc) and, where that refuses the size or dtype, dequantizes the
// weight once at build (W8A16, logged once).
// Weight-only integer codes (INT4 / INT8: GPTQ, AWQ, compressed-tensors dense layers) run through
// cpu_int_gemm_xwt on the CPU; on CUDA they stay packed (linear_int_cuda_kernel.cc: a GEMV that
// dequantizes in registers up to 4 rows, the weight dequantized into the workspace for cuBLASLt
// above) with BF16/F16 activations, and are dequantized once at build, logged once with the
// reason, for F32 activations, act-order g_idx and non-integer zero points. FP4 E2M1 codes
// (NVFP4 / MXFP4 dense layers): cpu_fp4_gemm_xwt on the CPU, dequantized once at build on CUDA.
// With LinearParams.output_features (unquantized weights only: what the fuse-ops pass writes for
// a layer's q/k/v projections, linear_fusion.cc) the node has one output per row block of the
// weight; each device computes every block exactly as a linear of that block alone would.
#include <algorithm>

#include "framework/compile/fuse_ops.h"
#include "framework/device/allocator.h"
#include "framework/device/convert.h"
#include "framework/op/op_registry.h"
#include "ops/nn/linear/fp4_gemm_cpu.h"
#include "ops/nn/linear/fp8_gemm_cpu.h"
#include "ops/nn/linear/int_gemm_cpu.h"
#include "ops/nn/linear/linear.h"
#include "ops/nn/linear/linear_gemm.h"
#include "ops/nn/nn_op_util.h"
#include "ops/nn/op_helpers.h"
#ifdef MG_WITH_CUDA
#include "ops/nn/cuda_kernels.h"
#endif

namespace mg {

namespace {

// y[t] = (y[t] + bias) * scale over the rows, on `pool`.
void bias_and_scale(float* y, int64_t tokens, int64_t out, const float* bias, float scale,
                    ThreadPool* pool) {
  if (bias == nullptr && scale == 1.0f) return;
  auto epilogue = [&](int64_t row_begin, int64_t row_end) {
    for (int64_t t = row_begin; t < row_end; ++t) {
      float* row = y + t * out;
      if (bias) {
        for (int64_t o = 0; o < out; ++o) row[o] = (row[o] + bias[o]) * scale;
      } else {
        for (int64_t o = 0; o < out; ++o) row[o] *= scale;
      }
    }
  };
  const int64_t grain = std::max<int64_t>(1, (1 << 14) / std::max<int64_t>(1, out));
  if (pool) {
    pool->parallel_for(tokens, epilogue, grain);
  } else {
    epilogue(0, tokens);
  }
}

// FP8 weight codes [out, in] with their scales, owned by the kernel (the plan keeps no placed copy
// of a weight taken as codes).
class LinearFp8CpuKernel final : public OpKernel {
 public:
  LinearFp8CpuKernel(Tensor codes, WeightQuantization quant, bool quantize_x, bool has_bias,
                     float scale)
      : codes_(std::move(codes)),
        quant_(std::move(quant)),
        quantize_x_(quantize_x),
        has_bias_(has_bias),
        scale_(scale) {
    if (quantize_x_) act_ = fp8_activation_quant(quant_);
  }

  void run(const ExecContext& ctx, std::span<const Tensor> inputs,
           std::span<const Tensor> outputs) override {
    const Tensor& x = inputs[0];
    const int64_t tokens = x.dim(0), in = codes_.dim(1), out = codes_.dim(0);
    MG_ASSERT(x.dim(1) == in && outputs[0].dim(1) == out, "linear: x {} weight {} y {}", x.str(),
              codes_.str(), outputs[0].str());
    const float* xin = x.data<float>();
    if (quantize_x_) {
      // Scratch from the workspace: [tokens, in] floats.
      float* xq = static_cast<float*>(ctx.workspace);
      cpu_fake_quantize_fp8_activations(xin, tokens, in, act_, xq);
      xin = xq;
    }
    float* y = outputs[0].data<float>();
    cpu_fp8_gemm_xwt(xin, tokens, fp8_codes(codes_), quant_.scale.data<float>(), out, in,
                     quant_.group, y, ctx.pool);
    bias_and_scale(y, tokens, out, has_bias_ ? inputs[2].data<float>() : nullptr, scale_, ctx.pool);
  }

  size_t workspace_bytes(int64_t max_tokens) const override {
    return quantize_x_ ? static_cast<size_t>(max_tokens * codes_.dim(1)) * sizeof(float) : 0;
  }

  std::string describe() const override {
    return fmt::format(
        "cpu fp8 (weight scales {}, {})", quant_.group.str(),
        quantize_x_ ? act_.str() + ": W8A8" : std::string("activations not quantized: W8A16"));
  }

 private:
  Tensor codes_;
  WeightQuantization quant_;
  bool quantize_x_;
  Fp8ActivationQuant act_;  // quantize_x_: how
  bool has_bias_;
  float scale_;
};

// Weight-only integer codes (W4A16 / W8A16: GPTQ, AWQ, compressed-tensors; canonical layout in
// framework/core/int_quant.h), owned by the kernel and dequantized 128 rows at a time inside the
// GEMM (ops/nn/linear/int_gemm_cpu.h). Activations stay F32.
class LinearIntCpuKernel final : public OpKernel {
 public:
  LinearIntCpuKernel(Tensor codes, WeightQuantization quant, bool has_bias, float scale)
      : codes_(std::move(codes)), quant_(std::move(quant)), has_bias_(has_bias), scale_(scale) {}

  void run(const ExecContext& ctx, std::span<const Tensor> inputs,
           std::span<const Tensor> outputs) override {
    const Tensor& x = inputs[0];
    const int64_t tokens = x.dim(0), in = quant_.logical_shape[1], out = quant_.logical_shape[0];
    MG_ASSERT(x.dim(1) == in && outputs[0].dim(1) == out, "linear: x {} weight {} y {}", x.str(),
              shape_str(quant_.logical_shape), outputs[0].str());
    float* y = outputs[0].data<float>();
    cpu_int_gemm_xwt(x.data<float>(), tokens, codes_, quant_, 0, y, ctx.pool);
    bias_and_scale(y, tokens, out, has_bias_ ? inputs[2].data<float>() : nullptr, scale_, ctx.pool);
  }

  std::string describe() const override {
    return fmt::format("cpu {} weight-only (scales {}{}{}; activations not quantized)",
                       quant_element_name(quant_.element), quant_.group.str(),
                       quant_.zero_point.defined() ? ", zero points" : "",
                       quant_.g_idx.defined() ? ", act-order g_idx" : "");
  }

 private:
  Tensor codes_;
  WeightQuantization quant_;
  bool has_bias_;
  float scale_;
};

// FP4 E2M1 codes [out, in / 2] with their effective F32 group scales (NVFP4's global scale folded
// in at load), owned by the kernel and dequantized 128 rows at a time inside the GEMM
// (ops/nn/linear/fp4_gemm_cpu.h). Weight-only: activations stay F32.
class LinearFp4CpuKernel final : public OpKernel {
 public:
  LinearFp4CpuKernel(Tensor codes, WeightQuantization quant, bool has_bias, float scale)
      : codes_(std::move(codes)), quant_(std::move(quant)), has_bias_(has_bias), scale_(scale) {}

  void run(const ExecContext& ctx, std::span<const Tensor> inputs,
           std::span<const Tensor> outputs) override {
    const Tensor& x = inputs[0];
    const int64_t tokens = x.dim(0), in = 2 * codes_.dim(1), out = codes_.dim(0);
    MG_ASSERT(x.dim(1) == in && outputs[0].dim(1) == out, "linear: x {} FP4 codes {} y {}", x.str(),
              codes_.str(), outputs[0].str());
    float* y = outputs[0].data<float>();
    cpu_fp4_gemm_xwt(x.data<float>(), tokens, static_cast<const uint8_t*>(codes_.raw()),
                     quant_.scale.data<float>(), out, in, quant_.group.cols_in(in), y, ctx.pool);
    bias_and_scale(y, tokens, out, has_bias_ ? inputs[2].data<float>() : nullptr, scale_, ctx.pool);
  }

  std::string describe() const override {
    return fmt::format("cpu FP4 E2M1 weight-only (scales {}; activations not quantized)",
                       quant_.group.str());
  }

 private:
  Tensor codes_;
  WeightQuantization quant_;
  bool has_bias_;
  float scale_;
};

class LinearCpuKernel final : public OpKernel {
 public:
  // `features`: the width of each output (linear_output_features).
  LinearCpuKernel(bool has_bias, float scale, std::vector<int64_t> features)
      : has_bias_(has_bias), scale_(scale), features_(std::move(features)) {}

  // inputs: x [T, in], weight [out, in], bias [out] (optional). outputs: y_i [T, features_[i]],
  // the consecutive row blocks of weight (one output, y [T, out], without output_features).
  void run(const ExecContext& ctx, std::span<const Tensor> inputs,
           std::span<const Tensor> outputs) override {
    const Tensor& x = inputs[0];
    const Tensor& weight = inputs[1];
    const int64_t tokens = x.dim(0);
    const int64_t in = x.dim(1);
    MG_ASSERT(weight.dim(1) == in && outputs.size() == features_.size(),
              "linear: x {} weight {}, {} outputs for {} blocks", x.str(), weight.str(),
              outputs.size(), features_.size());
    // Each block is the GEMM and epilogue of a linear of that block alone (its own column
    // blocking and threads): a fused q/k/v gives the unfused projections' floats, bit for bit.
    int64_t row = 0;
    for (size_t i = 0; i < features_.size(); ++i) {
      const int64_t out = features_[i];
      MG_ASSERT(outputs[i].dim(0) == tokens && outputs[i].dim(1) == out,
                "linear: output {} is {}, expected [{}, {}]", i, outputs[i].str(), tokens, out);
      float* y = outputs[i].data<float>();
      cpu_gemm_xwt(x.data<float>(), tokens, in, weight.data<float>() + row * in, out, y, ctx.pool);
      bias_and_scale(y, tokens, out, has_bias_ ? inputs[2].data<float>() + row : nullptr, scale_,
                     ctx.pool);
      row += out;
    }
    MG_ASSERT(row == weight.dim(0), "linear: output blocks of {} rows, weight {}", row,
              weight.str());
  }

  std::string describe() const override {
    if (features_.size() == 1) return "cpu";
    return fmt::format("cpu, {} outputs [{}] of one weight", features_.size(),
                       fmt::join(features_, ", "));
  }

 private:
  bool has_bias_;
  float scale_;
  std::vector<int64_t> features_;
};

class LinearOp final : public OpDef {
 public:
  std::string_view name() const override { return "linear"; }
  proto::Node::ParamsCase params_case() const override { return proto::Node::kLinear; }
  std::span<const InputSpec> inputs() const override { return kInputs; }
  int num_outputs() const override { return 1; }
  int num_outputs_of(const proto::Node& node) const override {
    return std::max(1, node.linear().output_features_size());
  }

  std::vector<ValueType> infer(const proto::Node& node,
                               std::span<const std::optional<ValueType>> inputs) const override {
    const proto::LinearParams& p = node.linear();
    if (p.has_scale()) expect_finite(p.scale(), "linear", "scale");
    const ValueType& x = require_input(inputs, 0, "x");
    expect_rows(x, "linear: x");
    const int64_t in = x.shape[1];
    MG_CHECK(in > 0, "linear: x must have at least one feature, got {}", value_type_str(x));

    const ValueType& weight = require_input(inputs, 1, "weight");
    if (!weight.quant_group) expect_float(weight, "linear: weight");
    MG_CHECK(weight.shape.size() == 2 && weight.shape[1] == in && weight.shape[0] > 0,
             "linear: weight must have shape [out, in] = [*, {}], got {}", in,
             value_type_str(weight));
    const int64_t out = weight.shape[0];

    expect_present_iff(inputs, 2, p.has_bias(), "linear", "bias", "has_bias");
    if (p.has_bias()) {
      expect_float(*inputs[2], "linear: bias");
      expect_shape(*inputs[2], {out}, "linear: bias");
    }
    if (p.output_features_size() == 0) return {ValueType{DType::kF32, {kTokens, out}}};
    MG_CHECK(p.output_features_size() >= 2 && p.output_features_size() <= kLinearMaxOutputs,
             "linear: output_features must have 2 to {} entries (or none), got {}",
             kLinearMaxOutputs, p.output_features_size());
    MG_CHECK(!weight.quant_group,
             "linear: output_features needs an unquantized weight, got {} (quantized linears are "
             "not fused)",
             value_type_str(weight));
    std::vector<ValueType> outputs;
    int64_t total = 0;
    for (const int64_t n : p.output_features()) {
      MG_CHECK(n >= 1 && n <= out, "linear: output_features [{}] must each be in [1, {}]",
               fmt::join(p.output_features(), ", "), out);
      total += n;
      outputs.push_back(ValueType{DType::kF32, {kTokens, n}});
    }
    MG_CHECK(total == out, "linear: output_features [{}] add up to {}, the weight has {} rows",
             fmt::join(p.output_features(), ", "), total, out);
    return outputs;
  }

  std::unique_ptr<OpKernel> create_kernel(const KernelContext& ctx) const override {
    static constexpr size_t kFloatActivations[] = {0};
    const proto::LinearParams& p = ctx.node.linear();
    const float scale = p.has_scale() ? p.scale() : 1.0f;
    const WeightQuantization quant =
        ctx.weight_quant.size() > 1 ? ctx.weight_quant[1] : WeightQuantization();
    // W8A8 where the checkpoint quantizes activations and the options let dense ops do it.
    const bool quantize_x = quant.defined() && quant.activation != ActivationQuant::kNone &&
                            ctx.options.quantize_activations &&
                            ctx.options.quantize_dense_activations;
#ifdef MG_WITH_CUDA
    if (ctx.options.device.is_cuda()) {
      if (!quant.defined()) return make_linear_cuda_kernel(ctx, p.has_bias(), scale);
      if (quantize_x) {
        const std::string why = linear_fp8_cuda_refusal(ctx, quant);
        if (why.empty()) return make_linear_fp8_cuda_kernel(ctx, p.has_bias(), scale, quant);
        log_fp8_w8a16_fallback_once("linear", why);
      }
      if (quant.is_integer()) {
        const std::string why = linear_int_cuda_refusal(ctx, quant);
        if (why.empty()) return make_linear_int_cuda_kernel(ctx, p.has_bias(), scale, quant);
        log_int_dequantize_fallback_once(why);
      }
      const Tensor dequantized =
          cast_cpu(dequantize_cpu(ctx.weights[1], quant), activation_dtype_of(ctx.options));
      Tensor placed = empty_tensor(ctx.options.device, dequantized.dtype(), dequantized.shape());
      copy_tensor(placed, dequantized);
      return make_linear_cuda_kernel(ctx, p.has_bias(), scale, std::move(placed));
    }
#endif
    expect_cpu_kernel(ctx, "linear", kFloatActivations);
    if (quant.is_integer()) {
      return std::make_unique<LinearIntCpuKernel>(ctx.weights[1], quant, p.has_bias(), scale);
    }
    if (quant.element == QuantElement::kFp4E2M1) {
      return std::make_unique<LinearFp4CpuKernel>(ctx.weights[1], quant, p.has_bias(), scale);
    }
    if (quant.defined()) {
      return std::make_unique<LinearFp8CpuKernel>(ctx.weights[1], quant, quantize_x, p.has_bias(),
                                                  scale);
    }
    return std::make_unique<LinearCpuKernel>(p.has_bias(), scale,
                                             linear_output_features(p, ctx.weights[1].dim(0)));
  }

 private:
  static constexpr InputSpec kInputs[] = {
      {"x"},
      {"weight", InputKind::kWeight, false, WeightPlacement::kCompute, /*takes_quantized=*/true},
      {"bias", InputKind::kWeight, /*optional=*/true},
  };
};

}  // namespace

std::vector<int64_t> linear_output_features(const proto::LinearParams& params, int64_t out) {
  if (params.output_features_size() == 0) return {out};
  return {params.output_features().begin(), params.output_features().end()};
}

void register_linear(OpRegistry& registry) {
  registry.add(std::make_unique<LinearOp>());
  register_graph_rewrite("sibling linears -> one linear with output_features",
                         fuse_sibling_linears);
}

}  // namespace mg
