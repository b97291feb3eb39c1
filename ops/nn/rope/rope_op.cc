// op "rope": inputs (x [T, heads * head_dim], positions [T] I32) -> out, same shape.
// The CPU kernel is RopeCpu (rope_cpu.h), shared with qk_norm_rope.
#include "framework/op/op_registry.h"
#include "ops/nn/nn_op_util.h"
#include "ops/nn/op_helpers.h"
#include "ops/nn/rope/rope.h"
#include "ops/nn/rope/rope_cpu.h"
#ifdef MG_WITH_CUDA
#include "ops/nn/cuda_kernels.h"
#endif

namespace mg {

namespace {

class RopeCpuKernel final : public OpKernel {
 public:
  explicit RopeCpuKernel(const proto::RopeParams& p) : rope_(p) {}

  // inputs: x [T, heads * head_dim], positions [T] I32. outputs: out [T, heads * head_dim].
  void run(const ExecContext& ctx, std::span<const Tensor> inputs,
           std::span<const Tensor> outputs) override {
    rope_.apply(inputs[0].data<float>(), inputs[1].data<int32_t>(), inputs[0].dim(0),
                outputs[0].data<float>(), ctx.pool);
  }

  std::string describe() const override { return "cpu"; }

 private:
  RopeCpu rope_;
};

class RopeOp final : public OpDef {
 public:
  std::string_view name() const override { return "rope"; }
  proto::Node::ParamsCase params_case() const override { return proto::Node::kRope; }
  std::span<const InputSpec> inputs() const override { return kInputs; }
  int num_outputs() const override { return 1; }

  std::vector<ValueType> infer(const proto::Node& node,
                               std::span<const std::optional<ValueType>> inputs) const override {
    const proto::RopeParams& p = node.rope();
    check_rope_params(p);
    const ValueType& x = require_input(inputs, 0, "x");
    expect_rows(x, "rope: x");
    MG_CHECK(x.shape[1] == p.num_heads() * p.head_dim(),
             "rope: x must have num_heads * head_dim = {} * {} = {} features, got {}",
             p.num_heads(), p.head_dim(), p.num_heads() * p.head_dim(), value_type_str(x));
    expect_token_ids(require_input(inputs, 1, "positions"), "rope: positions");
    return {ValueType{DType::kF32, x.shape}};
  }

  std::unique_ptr<OpKernel> create_kernel(const KernelContext& ctx) const override {
    static constexpr size_t kFloatActivations[] = {0};
#ifdef MG_WITH_CUDA
    if (ctx.options.device.is_cuda()) return make_rope_cuda_kernel(ctx, ctx.node.rope());
#endif
    expect_cpu_kernel(ctx, "rope", kFloatActivations);
    return std::make_unique<RopeCpuKernel>(ctx.node.rope());
  }

 private:
  static constexpr InputSpec kInputs[] = {{"x"}, {"positions"}};
};

}  // namespace

void register_rope(OpRegistry& registry) {
  registry.add(std::make_unique<RopeOp>());
}

}  // namespace mg
