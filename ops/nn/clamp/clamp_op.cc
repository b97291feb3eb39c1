// op "clamp": inputs (x [T, D]) -> out = min(max(x, min), max), elementwise (OLMoE clip_qkv).
#include <cmath>
#include <limits>

#include "framework/op/op_registry.h"
#include "ops/nn/nn_op_util.h"
#include "ops/nn/op_helpers.h"
#ifdef MG_WITH_CUDA
#include "ops/nn/cuda_kernels.h"
#endif

namespace mg {

namespace {

class ClampCpuKernel final : public OpKernel {
 public:
  // An unset bound is infinite, which leaves every value (and NaN) as it is.
  ClampCpuKernel(float min, float max) : min_(min), max_(max) {}

  void run(const ExecContext& ctx, std::span<const Tensor> inputs,
           std::span<const Tensor> outputs) override {
    const float* x = inputs[0].data<float>();
    float* out = outputs[0].data<float>();
    const float lo = min_, hi = max_;
    auto clamp = [&](int64_t begin, int64_t end) {
      // Comparisons with NaN are false, so NaN passes through as torch.clamp does.
      for (int64_t i = begin; i < end; ++i) {
        const float v = x[i];
        out[i] = v < lo ? lo : (v > hi ? hi : v);
      }
    };
    if (ctx.pool) {
      ctx.pool->parallel_for(outputs[0].numel(), clamp, 1 << 14);
    } else {
      clamp(0, outputs[0].numel());
    }
  }

  std::string describe() const override { return "cpu"; }

 private:
  float min_;
  float max_;
};

class ClampOp final : public OpDef {
 public:
  std::string_view name() const override { return "clamp"; }
  proto::Node::ParamsCase params_case() const override { return proto::Node::kClamp; }
  std::span<const InputSpec> inputs() const override { return kInputs; }
  int num_outputs() const override { return 1; }

  std::vector<ValueType> infer(const proto::Node& node,
                               std::span<const std::optional<ValueType>> inputs) const override {
    const proto::ClampParams& p = node.clamp();
    MG_CHECK(!p.has_min() || !std::isnan(p.min()), "clamp: min must not be NaN");
    MG_CHECK(!p.has_max() || !std::isnan(p.max()), "clamp: max must not be NaN");
    MG_CHECK(!p.has_min() || !p.has_max() || p.min() <= p.max(),
             "clamp: min {} must not exceed max {}", p.min(), p.max());
    const ValueType& x = require_input(inputs, 0, "x");
    expect_rows(x, "clamp: x");
    return {ValueType{DType::kF32, x.shape}};
  }

  std::unique_ptr<OpKernel> create_kernel(const KernelContext& ctx) const override {
    static constexpr size_t kFloatActivations[] = {0};
    const proto::ClampParams& p = ctx.node.clamp();
    constexpr float kInf = std::numeric_limits<float>::infinity();
    const float min = p.has_min() ? p.min() : -kInf;
    const float max = p.has_max() ? p.max() : kInf;
#ifdef MG_WITH_CUDA
    if (ctx.options.device.is_cuda()) return make_clamp_cuda_kernel(ctx, min, max);
#endif
    expect_cpu_kernel(ctx, "clamp", kFloatActivations);
    return std::make_unique<ClampCpuKernel>(min, max);
  }

 private:
  static constexpr InputSpec kInputs[] = {{"x"}};
};

}  // namespace

void register_clamp(OpRegistry& registry) {
  registry.add(std::make_unique<ClampOp>());
}

}  // namespace mg
