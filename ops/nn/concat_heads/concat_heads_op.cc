// op "concat_heads": inputs (a [T, n * da], b [T, m * db]) -> out [T, n * (da + db)], m = 1 or n.
// Output head h = [a head h, b head h] (b head 0 for every h when m = 1, the shared MLA rope key).
#include <algorithm>
#include <cstring>

#include "framework/op/op_registry.h"
#include "ops/nn/nn_op_util.h"
#include "ops/nn/op_helpers.h"
#ifdef MG_WITH_CUDA
#include "ops/nn/cuda_kernels.h"
#endif

namespace mg {

namespace {

class ConcatHeadsCpuKernel final : public OpKernel {
 public:
  ConcatHeadsCpuKernel(int64_t heads, int64_t a_dim, int64_t b_heads, int64_t b_dim)
      : heads_(heads), a_dim_(a_dim), b_heads_(b_heads), b_dim_(b_dim) {}

  // inputs: a [T, n * da], b [T, m * db]. outputs: out [T, n * (da + db)].
  void run(const ExecContext& ctx, std::span<const Tensor> inputs,
           std::span<const Tensor> outputs) override {
    const int64_t tokens = inputs[0].dim(0);
    const float* a = inputs[0].data<float>();
    const float* b = inputs[1].data<float>();
    float* out = outputs[0].data<float>();
    const int64_t heads = heads_, a_dim = a_dim_, b_dim = b_dim_, b_heads = b_heads_;
    const int64_t out_dim = a_dim + b_dim;
    auto copy = [&](int64_t row_begin, int64_t row_end) {
      for (int64_t t = row_begin; t < row_end; ++t) {
        const float* a_row = a + t * heads * a_dim;
        const float* b_row = b + t * b_heads * b_dim;
        float* o_row = out + t * heads * out_dim;
        for (int64_t h = 0; h < heads; ++h) {
          std::memcpy(o_row + h * out_dim, a_row + h * a_dim,
                      static_cast<size_t>(a_dim) * sizeof(float));
          std::memcpy(o_row + h * out_dim + a_dim, b_row + (b_heads == 1 ? 0 : h) * b_dim,
                      static_cast<size_t>(b_dim) * sizeof(float));
        }
      }
    };
    const int64_t grain = std::max<int64_t>(1, (1 << 14) / std::max<int64_t>(1, heads * out_dim));
    if (ctx.pool) {
      ctx.pool->parallel_for(tokens, copy, grain);
    } else {
      copy(0, tokens);
    }
  }

  std::string describe() const override { return "cpu"; }

 private:
  int64_t heads_;
  int64_t a_dim_;
  int64_t b_heads_;  // 1 or heads_
  int64_t b_dim_;
};

class ConcatHeadsOp final : public OpDef {
 public:
  std::string_view name() const override { return "concat_heads"; }
  proto::Node::ParamsCase params_case() const override { return proto::Node::kConcatHeads; }
  std::span<const InputSpec> inputs() const override { return kInputs; }
  int num_outputs() const override { return 1; }

  std::vector<ValueType> infer(const proto::Node& node,
                               std::span<const std::optional<ValueType>> inputs) const override {
    const proto::ConcatHeadsParams& p = node.concat_heads();
    MG_CHECK(p.num_heads() > 0 && p.a_head_dim() > 0 && p.b_head_dim() > 0,
             "concat_heads: num_heads, a_head_dim and b_head_dim must be positive, got {}, {}, {}",
             p.num_heads(), p.a_head_dim(), p.b_head_dim());
    const ValueType& a = require_input(inputs, 0, "a");
    expect_rows(a, "concat_heads: a");
    MG_CHECK(a.shape[1] == p.num_heads() * p.a_head_dim(),
             "concat_heads: a must have num_heads * a_head_dim = {} * {} = {} features, got {}",
             p.num_heads(), p.a_head_dim(), p.num_heads() * p.a_head_dim(), value_type_str(a));
    const ValueType& b = require_input(inputs, 1, "b");
    expect_rows(b, "concat_heads: b");
    MG_CHECK(b.shape[1] == p.b_head_dim() || b.shape[1] == p.num_heads() * p.b_head_dim(),
             "concat_heads: b must have b_head_dim = {} features (one head shared by all) or "
             "num_heads * b_head_dim = {}, got {}",
             p.b_head_dim(), p.num_heads() * p.b_head_dim(), value_type_str(b));
    return {ValueType{DType::kF32, {kTokens, p.num_heads() * (p.a_head_dim() + p.b_head_dim())}}};
  }

  std::unique_ptr<OpKernel> create_kernel(const KernelContext& ctx) const override {
    static constexpr size_t kFloatActivations[] = {0, 1};
    const proto::ConcatHeadsParams& p = ctx.node.concat_heads();
#ifdef MG_WITH_CUDA
    if (ctx.options.device.is_cuda()) return make_concat_heads_cuda_kernel(ctx, p, b_heads(ctx));
#endif
    expect_cpu_kernel(ctx, "concat_heads", kFloatActivations);
    return std::make_unique<ConcatHeadsCpuKernel>(p.num_heads(), p.a_head_dim(), b_heads(ctx),
                                                  p.b_head_dim());
  }

 private:
  // m: the number of heads of b (1 or num_heads), from its width.
  static int64_t b_heads(const KernelContext& ctx) {
    MG_ASSERT(ctx.input_types.size() > 1 && ctx.input_types[1].has_value(),
              "concat_heads: kernel built without the type of b");
    return ctx.input_types[1]->shape[1] / ctx.node.concat_heads().b_head_dim();
  }

  static constexpr InputSpec kInputs[] = {{"a"}, {"b"}};
};

}  // namespace

void register_concat_heads(OpRegistry& registry) {
  registry.add(std::make_unique<ConcatHeadsOp>());
}

}  // namespace mg
