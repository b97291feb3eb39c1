// op "gated_mlp": inputs (x [T, H], gate [I, H], up [I, H], down [H, I]) -> out [T, H].
// out = down(act(gate x) * up x). CPU kernel: three cpu_gemm_xwt calls with the gated activation
// in between, on workspace rows g, u [T, I].
#include <algorithm>
#include <string>

#include "framework/op/op_registry.h"
#include "ops/nn/activation.h"
#include "ops/nn/gated_mlp/gated_mlp.h"
#include "ops/nn/linear/fp8_gemm_cpu.h"
#include "ops/nn/linear/linear_gemm.h"
#include "ops/nn/nn_op_util.h"
#include "ops/nn/op_helpers.h"
#ifdef MG_WITH_CUDA
#include "ops/nn/cuda_kernels.h"
#endif

namespace mg {

void check_gated_mlp_activation(proto::Activation activation) {
  MG_CHECK(activation == proto::SILU_GATED || activation == proto::GELU_GATED ||
               activation == proto::GELU_TANH_GATED,
           "gated_mlp: activation {} is not supported (expected SILU_GATED, GELU_GATED or "
           "GELU_TANH_GATED)",
           proto::Activation_IsValid(activation) ? proto::Activation_Name(activation)
                                                 : std::to_string(static_cast<int>(activation)));
}

namespace {

// The activations this op supports (checked), as an enum the kernel can switch over fully.
enum class GatedActivation { kSilu, kGeluErf, kGeluTanh };

GatedActivation gated_activation_of(proto::Activation activation) {
  check_gated_mlp_activation(activation);
  if (activation == proto::SILU_GATED) return GatedActivation::kSilu;
  if (activation == proto::GELU_GATED) return GatedActivation::kGeluErf;
  return GatedActivation::kGeluTanh;
}

// h[n] = act(g[n]) * u[n], in place in g.
template <float (*Act)(float)>
void gate_rows(float* g, const float* u, int64_t begin, int64_t end) {
  for (int64_t n = begin; n < end; ++n) g[n] = Act(g[n]) * u[n];
}

class GatedMlpCpuKernel final : public OpKernel {
 public:
  // `act_quant`: FP8 (W8A8) checkpoints quantize both GEMMs' inputs (per token per 128 channels,
  // per token, or with static scales); their weights arrive dequantized, which is what an FP8 GEMM
  // multiplies by. nullopt: inputs kept (every other model, and W8A16).
  GatedMlpCpuKernel(GatedActivation activation, int64_t hidden, int64_t intermediate,
                    std::optional<Fp8MlpActivationQuant> act_quant)
      : activation_(activation),
        hidden_(hidden),
        intermediate_(intermediate),
        act_quant_(act_quant) {}

  // inputs: x [T, H], gate [I, H], up [I, H], down [H, I]. outputs: out [T, H].
  // workspace: g [T, I] then u [T, I] (W8A8: then xq [T, H]).
  void run(const ExecContext& ctx, std::span<const Tensor> inputs,
           std::span<const Tensor> outputs) override {
    const int64_t tokens = inputs[0].dim(0);
    const int64_t hidden = inputs[0].dim(1);
    const int64_t inter = intermediate_;
    MG_ASSERT(ctx.workspace_bytes >= workspace_bytes(tokens),
              "gated_mlp: workspace of {} bytes, need {}", ctx.workspace_bytes,
              workspace_bytes(tokens));
    float* g = static_cast<float*>(ctx.workspace);
    float* u = g + tokens * inter;
    const float* x = inputs[0].data<float>();
    if (act_quant_) {
      float* xq = u + tokens * inter;
      cpu_fake_quantize_fp8_activations(x, tokens, hidden, act_quant_->input, xq);
      x = xq;
    }
    cpu_gemm_xwt(x, tokens, hidden, inputs[1].data<float>(), inter, g, ctx.pool);
    cpu_gemm_xwt(x, tokens, hidden, inputs[2].data<float>(), inter, u, ctx.pool);

    auto activate = [&](int64_t begin, int64_t end) {
      switch (activation_) {
        case GatedActivation::kSilu:
          return gate_rows<silu>(g, u, begin, end);
        case GatedActivation::kGeluErf:
          return gate_rows<gelu_erf>(g, u, begin, end);
        case GatedActivation::kGeluTanh:
          return gate_rows<gelu_tanh>(g, u, begin, end);
      }
    };
    const int64_t n = tokens * inter;
    if (ctx.pool) {
      ctx.pool->parallel_for(n, activate, 1 << 13);
    } else {
      activate(0, n);
    }
    if (act_quant_) cpu_fake_quantize_fp8_activations(g, tokens, inter, act_quant_->hidden, g);
    cpu_gemm_xwt(g, tokens, inter, inputs[3].data<float>(), hidden, outputs[0].data<float>(),
                 ctx.pool);
  }

  size_t workspace_bytes(int64_t max_tokens) const override {
    return static_cast<size_t>(2 * max_tokens * intermediate_ +
                               (act_quant_ ? max_tokens * hidden_ : 0)) *
           sizeof(float);
  }

  std::string describe() const override {
    return act_quant_ ? "cpu (FP8 weights dequantized, activations quantized: W8A8)" : "cpu";
  }

 private:
  GatedActivation activation_;
  int64_t hidden_;
  int64_t intermediate_;
  std::optional<Fp8MlpActivationQuant> act_quant_;
};

class GatedMlpOp final : public OpDef {
 public:
  std::string_view name() const override { return "gated_mlp"; }
  proto::Node::ParamsCase params_case() const override { return proto::Node::kGatedMlp; }
  std::span<const InputSpec> inputs() const override { return kInputs; }
  int num_outputs() const override { return 1; }

  std::vector<ValueType> infer(const proto::Node& node,
                               std::span<const std::optional<ValueType>> inputs) const override {
    check_gated_mlp_activation(node.gated_mlp().activation());
    const ValueType& x = require_input(inputs, 0, "x");
    expect_rows(x, "gated_mlp: x");
    const int64_t hidden = x.shape[1];
    MG_CHECK(hidden > 0, "gated_mlp: x must have at least one feature, got {}", value_type_str(x));
    const ValueType& gate = require_input(inputs, 1, "gate");
    expect_float(gate, "gated_mlp: gate");
    MG_CHECK(gate.shape.size() == 2 && gate.shape[1] == hidden && gate.shape[0] > 0,
             "gated_mlp: gate must have shape [I, H] = [*, {}], got {}", hidden,
             value_type_str(gate));
    const int64_t inter = gate.shape[0];
    const ValueType& up = require_input(inputs, 2, "up");
    expect_float(up, "gated_mlp: up");
    expect_shape(up, {inter, hidden}, "gated_mlp: up (like gate, [I, H])");
    const ValueType& down = require_input(inputs, 3, "down");
    expect_float(down, "gated_mlp: down");
    expect_shape(down, {hidden, inter}, "gated_mlp: down ([H, I])");
    return {ValueType{DType::kF32, {kTokens, hidden}}};
  }

  std::unique_ptr<OpKernel> create_kernel(const KernelContext& ctx) const override {
    static constexpr size_t kFloatActivations[] = {0};
#ifdef MG_WITH_CUDA
    if (ctx.options.device.is_cuda()) {
      check_gated_mlp_activation(ctx.node.gated_mlp().activation());
      MG_ASSERT(ctx.input_types.size() > 1 && ctx.input_types[1].has_value(),
                "gated_mlp: kernel built without the gate type");
      return make_gated_mlp_cuda_kernel(ctx, ctx.node.gated_mlp().activation(),
                                        ctx.input_types[1]->shape[0]);
    }
#endif
    expect_cpu_kernel(ctx, "gated_mlp", kFloatActivations);
    MG_ASSERT(ctx.input_types.size() > 1 && ctx.input_types[1].has_value(),
              "gated_mlp: kernel built without the gate type");
    // FP8 gate/up/down (dequantized by the place-weights pass) quantize the activations they
    // multiply when dense activations are quantized (CompileOptions::quantize_dense_activations).
    auto quant = [&](size_t i) {
      return ctx.weight_quant.size() > i ? ctx.weight_quant[i] : WeightQuantization();
    };
    const std::optional<Fp8MlpActivationQuant> act_quant = fp8_mlp_activation_quant(
        quant(2), quant(3),
        ctx.options.quantize_activations && ctx.options.quantize_dense_activations);
    return std::make_unique<GatedMlpCpuKernel>(
        gated_activation_of(ctx.node.gated_mlp().activation()), ctx.input_types[1]->shape[1],
        ctx.input_types[1]->shape[0], act_quant);
  }

 private:
  static constexpr InputSpec kInputs[] = {
      {"x"},
      {"gate", InputKind::kWeight},
      {"up", InputKind::kWeight},
      {"down", InputKind::kWeight},
  };
};

}  // namespace

void register_gated_mlp(OpRegistry& registry) {
  registry.add(std::make_unique<GatedMlpOp>());
}

}  // namespace mg
