// op "linear": inputs (x [T, in], weight [out, in], bias [out] or "") -> y [T, out].
// y = (x Wᵀ + b) * scale. CPU kernel: cpu_gemm_xwt (Eigen, parallel over output features).
#include <algorithm>

#include "framework/op/op_registry.h"
#include "ops/nn/linear/linear_gemm.h"
#include "ops/nn/nn_op_util.h"
#include "ops/nn/op_helpers.h"
#ifdef MG_WITH_CUDA
#include "ops/nn/cuda_kernels.h"
#endif

namespace mg {

namespace {

class LinearCpuKernel final : public OpKernel {
 public:
  LinearCpuKernel(bool has_bias, float scale) : has_bias_(has_bias), scale_(scale) {}

  // inputs: x [T, in], weight [out, in], bias [out] (optional). outputs: y [T, out].
  void run(const ExecContext& ctx, std::span<const Tensor> inputs,
           std::span<const Tensor> outputs) override {
    const Tensor& x = inputs[0];
    const Tensor& weight = inputs[1];
    const int64_t tokens = x.dim(0);
    const int64_t in = x.dim(1);
    const int64_t out = weight.dim(0);
    MG_ASSERT(weight.dim(1) == in && outputs[0].dim(0) == tokens && outputs[0].dim(1) == out,
              "linear: x {} weight {} y {}", x.str(), weight.str(), outputs[0].str());
    float* y = outputs[0].data<float>();
    cpu_gemm_xwt(x.data<float>(), tokens, in, weight.data<float>(), out, y, ctx.pool);
    if (!has_bias_ && scale_ == 1.0f) return;

    const float* bias = has_bias_ ? inputs[2].data<float>() : nullptr;
    const float scale = scale_;
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
    if (ctx.pool) {
      ctx.pool->parallel_for(tokens, epilogue, grain);
    } else {
      epilogue(0, tokens);
    }
  }

  std::string describe() const override { return "cpu"; }

 private:
  bool has_bias_;
  float scale_;
};

class LinearOp final : public OpDef {
 public:
  std::string_view name() const override { return "linear"; }
  proto::Node::ParamsCase params_case() const override { return proto::Node::kLinear; }
  std::span<const InputSpec> inputs() const override { return kInputs; }
  int num_outputs() const override { return 1; }

  std::vector<ValueType> infer(const proto::Node& node,
                               std::span<const std::optional<ValueType>> inputs) const override {
    const proto::LinearParams& p = node.linear();
    if (p.has_scale()) expect_finite(p.scale(), "linear", "scale");
    const ValueType& x = require_input(inputs, 0, "x");
    expect_rows(x, "linear: x");
    const int64_t in = x.shape[1];
    MG_CHECK(in > 0, "linear: x must have at least one feature, got {}", value_type_str(x));

    const ValueType& weight = require_input(inputs, 1, "weight");
    expect_float(weight, "linear: weight");
    MG_CHECK(weight.shape.size() == 2 && weight.shape[1] == in && weight.shape[0] > 0,
             "linear: weight must have shape [out, in] = [*, {}], got {}", in,
             value_type_str(weight));
    const int64_t out = weight.shape[0];

    expect_present_iff(inputs, 2, p.has_bias(), "linear", "bias", "has_bias");
    if (p.has_bias()) {
      expect_float(*inputs[2], "linear: bias");
      expect_shape(*inputs[2], {out}, "linear: bias");
    }
    return {ValueType{DType::kF32, {kTokens, out}}};
  }

  std::unique_ptr<OpKernel> create_kernel(const KernelContext& ctx) const override {
    static constexpr size_t kFloatActivations[] = {0};
    const proto::LinearParams& p = ctx.node.linear();
#ifdef MG_WITH_CUDA
    if (ctx.options.device.is_cuda()) {
      return make_linear_cuda_kernel(ctx, p.has_bias(), p.has_scale() ? p.scale() : 1.0f);
    }
#endif
    expect_cpu_kernel(ctx, "linear", kFloatActivations);
    return std::make_unique<LinearCpuKernel>(p.has_bias(), p.has_scale() ? p.scale() : 1.0f);
  }

 private:
  static constexpr InputSpec kInputs[] = {
      {"x"},
      {"weight", InputKind::kWeight},
      {"bias", InputKind::kWeight, /*optional=*/true},
  };
};

}  // namespace

void register_linear(OpRegistry& registry) {
  registry.add(std::make_unique<LinearOp>());
}

}  // namespace mg
