#include "framework/op/op_registry.h"
#include "ops/nn/add/add.h"
#include "ops/nn/nn_op_util.h"
#include "ops/nn/op_helpers.h"
#ifdef MG_WITH_CUDA
#include "ops/nn/cuda_kernels.h"
#endif

namespace mg {

namespace {

class AddCpuKernel final : public OpKernel {
 public:
  explicit AddCpuKernel(float scale) : scale_(scale) {}

  void run(const ExecContext& ctx, std::span<const Tensor> inputs,
           std::span<const Tensor> outputs) override {
    const float* a = inputs[0].data<float>();
    const float* b = inputs[1].data<float>();
    float* out = outputs[0].data<float>();
    const float scale = scale_;
    ctx.pool->parallel_for(
        outputs[0].numel(),
        [&](int64_t begin, int64_t end) {
          for (int64_t i = begin; i < end; ++i) out[i] = a[i] + scale * b[i];
        },
        1 << 14);
  }

  std::string describe() const override { return "cpu"; }

 private:
  float scale_;
};

class AddOp final : public OpDef {
 public:
  std::string_view name() const override { return "add"; }
  proto::Node::ParamsCase params_case() const override { return proto::Node::kAdd; }
  std::span<const InputSpec> inputs() const override { return kInputs; }
  int num_outputs() const override { return 1; }

  std::vector<ValueType> infer(const proto::Node& node,
                               std::span<const std::optional<ValueType>> inputs) const override {
    const proto::AddParams& p = node.add();
    if (p.has_scale()) expect_finite(p.scale(), "add", "scale");
    const ValueType& a = require_input(inputs, 0, "a");
    const ValueType& b = require_input(inputs, 1, "b");
    expect_activation(a, "input a");
    MG_CHECK(a.shape == b.shape, "inputs must have the same shape, got {} and {}",
             value_type_str(a), value_type_str(b));
    return {ValueType{DType::kF32, a.shape}};
  }

  std::unique_ptr<OpKernel> create_kernel(const KernelContext& ctx) const override {
    const auto& p = ctx.node.add();
    const float scale = p.has_scale() ? p.scale() : 1.0f;
#ifdef MG_WITH_CUDA
    if (ctx.options.device.is_cuda()) return make_add_cuda_kernel(ctx, scale);
#endif
    MG_CHECK(ctx.options.device.is_cpu(), "op add has no kernel for {}", ctx.options.device.str());
    return std::make_unique<AddCpuKernel>(scale);
  }

 private:
  static constexpr InputSpec kInputs[] = {{"a"}, {"b"}};
};

}  // namespace

void register_add(OpRegistry& registry) {
  registry.add(std::make_unique<AddOp>());
}

}  // namespace mg
