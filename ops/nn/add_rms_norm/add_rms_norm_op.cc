// op "add_rms_norm" (params: RmsNormParams, group_size 0): inputs (a [T, D], b [T, D], weight
// [D] or "") -> (sum [T, D], y [T, D]). See add_rms_norm.h. CPU kernel: the add's loop, then the
// rms_norm op's own loop (rms_norm_cpu), so the fused and unfused graphs compute the same floats.
#include <cmath>

#include "framework/compile/fuse_ops.h"
#include "framework/op/op_registry.h"
#include "ops/nn/add_rms_norm/add_rms_norm.h"
#include "ops/nn/nn_op_util.h"
#include "ops/nn/op_helpers.h"
#include "ops/nn/rms_norm/rms_norm_cpu.h"
#ifdef MG_WITH_CUDA
#include "ops/nn/add_rms_norm/add_rms_norm_cuda_kernel.h"
#endif

namespace mg {

namespace {

class AddRmsNormCpuKernel final : public OpKernel {
 public:
  explicit AddRmsNormCpuKernel(float eps) : eps_(eps) {}

  // inputs: a, b [T, D], weight [D] (optional). outputs: sum, y [T, D].
  void run(const ExecContext& ctx, std::span<const Tensor> inputs,
           std::span<const Tensor> outputs) override {
    const float* a = inputs[0].data<float>();
    const float* b = inputs[1].data<float>();
    float* sum = outputs[0].data<float>();
    // The add op's expression with its scale of 1: the same float.
    constexpr float scale = 1.0f;
    ctx.pool->parallel_for(
        outputs[0].numel(),
        [&](int64_t begin, int64_t end) {
          for (int64_t i = begin; i < end; ++i) sum[i] = a[i] + scale * b[i];
        },
        1 << 14);
    const float* weight =
        inputs.size() > 2 && inputs[2].defined() ? inputs[2].data<float>() : nullptr;
    rms_norm_cpu(sum, inputs[0].dim(0), inputs[0].dim(1), weight, eps_, outputs[1].data<float>(),
                 ctx.pool);
  }

  std::string describe() const override { return "cpu"; }

 private:
  float eps_;
};

class AddRmsNormOp final : public OpDef {
 public:
  std::string_view name() const override { return "add_rms_norm"; }
  proto::Node::ParamsCase params_case() const override { return proto::Node::kRmsNorm; }
  std::span<const InputSpec> inputs() const override { return kInputs; }
  int num_outputs() const override { return 2; }

  std::vector<ValueType> infer(const proto::Node& node,
                               std::span<const std::optional<ValueType>> inputs) const override {
    const proto::RmsNormParams& n = node.rms_norm();
    MG_CHECK(std::isfinite(n.eps()) && n.eps() > 0.0f,
             "add_rms_norm: eps must be positive and finite, got {} (unset eps reads as 0)",
             n.eps());
    MG_CHECK(n.group_size() == 0, "add_rms_norm: group_size must be 0 (whole rows), got {}",
             n.group_size());
    const ValueType& a = require_input(inputs, 0, "a");
    const ValueType& b = require_input(inputs, 1, "b");
    expect_rows(a, "add_rms_norm: a");
    MG_CHECK(a.shape == b.shape, "add_rms_norm: a and b must have the same shape, got {} and {}",
             value_type_str(a), value_type_str(b));
    const int64_t dim = a.shape[1];
    MG_CHECK(dim > 0, "add_rms_norm: a must have at least one feature, got {}", value_type_str(a));
    expect_present_iff(inputs, 2, n.has_weight(), "add_rms_norm", "weight", "has_weight");
    if (n.has_weight()) {
      expect_float(*inputs[2], "add_rms_norm: weight");
      expect_shape(*inputs[2], {dim}, "add_rms_norm: weight");
    }
    return {ValueType{DType::kF32, a.shape}, ValueType{DType::kF32, a.shape}};
  }

  std::unique_ptr<OpKernel> create_kernel(const KernelContext& ctx) const override {
    static constexpr size_t kFloatActivations[] = {0, 1};
    const float eps = ctx.node.rms_norm().eps();
#ifdef MG_WITH_CUDA
    if (ctx.options.device.is_cuda()) return make_add_rms_norm_cuda_kernel(ctx, eps);
#endif
    expect_cpu_kernel(ctx, "add_rms_norm", kFloatActivations);
    return std::make_unique<AddRmsNormCpuKernel>(eps);
  }

 private:
  static constexpr InputSpec kInputs[] = {
      {"a"},
      {"b"},
      {"weight", InputKind::kWeight, /*optional=*/true},
  };
};

}  // namespace

void register_add_rms_norm(OpRegistry& registry) {
  registry.add(std::make_unique<AddRmsNormOp>());
  register_graph_rewrite("add + rms_norm -> add_rms_norm", fuse_add_rms_norm);
}

}  // namespace mg
