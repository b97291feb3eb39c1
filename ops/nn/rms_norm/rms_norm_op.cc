// op "rms_norm": inputs (x [T, D], weight [G] or "") -> y [T, D].
// y = x * rsqrt(mean over each group of G elements of x² + eps) * w.
#include <cmath>

#include "framework/op/op_registry.h"
#include "ops/nn/nn_op_util.h"
#include "ops/nn/op_helpers.h"
#include "ops/nn/rms_norm/rms_norm_cpu.h"
#ifdef MG_WITH_CUDA
#include "ops/nn/cuda_kernels.h"
#endif

namespace mg {

namespace {

class RmsNormCpuKernel final : public OpKernel {
 public:
  RmsNormCpuKernel(int64_t group_size, float eps) : group_size_(group_size), eps_(eps) {}

  // inputs: x [T, D], weight [G] (optional). outputs: y [T, D].
  void run(const ExecContext& ctx, std::span<const Tensor> inputs,
           std::span<const Tensor> outputs) override {
    const Tensor& x_t = inputs[0];
    const int64_t tokens = x_t.dim(0);
    const int64_t dim = x_t.dim(1);
    const int64_t group = group_size_ == 0 ? dim : group_size_;
    const int64_t groups_per_row = dim / group;
    const float* weight =
        inputs.size() > 1 && inputs[1].defined() ? inputs[1].data<float>() : nullptr;
    rms_norm_cpu(x_t.data<float>(), tokens * groups_per_row, group, weight, eps_,
                 outputs[0].data<float>(), ctx.pool);
  }

  std::string describe() const override { return "cpu"; }

 private:
  int64_t group_size_;  // 0: the whole row
  float eps_;
};

class RmsNormOp final : public OpDef {
 public:
  std::string_view name() const override { return "rms_norm"; }
  proto::Node::ParamsCase params_case() const override { return proto::Node::kRmsNorm; }
  std::span<const InputSpec> inputs() const override { return kInputs; }
  int num_outputs() const override { return 1; }

  std::vector<ValueType> infer(const proto::Node& node,
                               std::span<const std::optional<ValueType>> inputs) const override {
    const proto::RmsNormParams& p = node.rms_norm();
    MG_CHECK(std::isfinite(p.eps()) && p.eps() > 0.0f,
             "rms_norm: eps must be positive and finite, got {} (unset eps reads as 0)", p.eps());
    const ValueType& x = require_input(inputs, 0, "x");
    expect_rows(x, "rms_norm: x");
    const int64_t dim = x.shape[1];
    MG_CHECK(dim > 0, "rms_norm: x must have at least one feature, got {}", value_type_str(x));
    MG_CHECK(p.group_size() >= 0, "rms_norm: group_size {} must be >= 0 (0 means the whole row)",
             p.group_size());
    const int64_t group = p.group_size() == 0 ? dim : p.group_size();
    MG_CHECK(dim % group == 0, "rms_norm: row size {} of x {} is not divisible by group_size {}",
             dim, value_type_str(x), group);
    expect_present_iff(inputs, 1, p.has_weight(), "rms_norm", "weight", "has_weight");
    if (p.has_weight()) {
      expect_float(*inputs[1], "rms_norm: weight");
      expect_shape(*inputs[1], {group}, "rms_norm: weight");
    }
    return {ValueType{DType::kF32, x.shape}};
  }

  std::unique_ptr<OpKernel> create_kernel(const KernelContext& ctx) const override {
    static constexpr size_t kFloatActivations[] = {0};
    const proto::RmsNormParams& p = ctx.node.rms_norm();
#ifdef MG_WITH_CUDA
    if (ctx.options.device.is_cuda()) {
      return make_rms_norm_cuda_kernel(ctx, p.group_size(), p.eps());
    }
#endif
    expect_cpu_kernel(ctx, "rms_norm", kFloatActivations);
    return std::make_unique<RmsNormCpuKernel>(p.group_size(), p.eps());
  }

 private:
  static constexpr InputSpec kInputs[] = {
      {"x"},
      {"weight", InputKind::kWeight, /*optional=*/true},
  };
};

}  // namespace

void register_rms_norm(OpRegistry& registry) {
  registry.add(std::make_unique<RmsNormOp>());
}

}  // namespace mg
