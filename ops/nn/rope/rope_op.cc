// op "rope": inputs (x [T, heads * head_dim], positions [T] I32) -> out, same shape.
// The CPU kernel computes inv_freq once at build; per token it evaluates cos/sin of each
// frequency once (fp64 angle, so large positions stay exact) and rotates that pair in every head.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "framework/op/op_registry.h"
#include "ops/nn/nn_op_util.h"
#include "ops/nn/op_helpers.h"
#include "ops/nn/rope/rope.h"
#ifdef MG_WITH_CUDA
#include "ops/nn/cuda_kernels.h"
#endif

namespace mg {

namespace {

class RopeCpuKernel final : public OpKernel {
 public:
  explicit RopeCpuKernel(const proto::RopeParams& p)
      : num_heads_(p.num_heads()),
        head_dim_(p.head_dim()),
        rotary_dim_(rope_rotary_dim(p)),
        rotary_offset_(p.rotary_offset()),
        interleaved_(p.pairing() == proto::INTERLEAVED),
        inv_freq_(rope_inv_freq(p)),
        attention_factor_(rope_attention_factor(p)) {}

  // inputs: x [T, heads * head_dim], positions [T] I32. outputs: out [T, heads * head_dim].
  void run(const ExecContext& ctx, std::span<const Tensor> inputs,
           std::span<const Tensor> outputs) override {
    const float* x = inputs[0].data<float>();
    const int32_t* positions = inputs[1].data<int32_t>();
    float* out = outputs[0].data<float>();
    const int64_t tokens = inputs[0].dim(0);
    const int64_t width = num_heads_ * head_dim_;
    for (int64_t t = 0; t < tokens; ++t) {
      MG_CHECK(positions[t] >= 0, "rope: position {} (row {}) is negative", positions[t], t);
    }
    const int64_t half = rotary_dim_ / 2;
    // Pair i of a head: dims (a_i, b_i) relative to the rotary slice.
    const int64_t a_step = interleaved_ ? 2 : 1;
    const int64_t b_offset = interleaved_ ? 1 : half;
    auto rotate = [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t) {
        const float* xr = x + t * width;
        float* outr = out + t * width;
        if (outr != xr) std::memcpy(outr, xr, static_cast<size_t>(width) * sizeof(float));
        const double position = positions[t];
        for (int64_t i = 0; i < half; ++i) {
          const double angle = position * inv_freq_[i];
          const float c = static_cast<float>(std::cos(angle) * attention_factor_);
          const float s = static_cast<float>(std::sin(angle) * attention_factor_);
          const int64_t a = rotary_offset_ + i * a_step;
          const int64_t b = a + b_offset;
          for (int64_t h = 0; h < num_heads_; ++h) {
            const int64_t base = h * head_dim_;
            const float xa = xr[base + a];
            const float xb = xr[base + b];
            outr[base + a] = xa * c - xb * s;
            outr[base + b] = xb * c + xa * s;
          }
        }
      }
    };
    const int64_t grain = std::max<int64_t>(1, (1 << 13) / std::max<int64_t>(1, num_heads_ * half));
    if (ctx.pool) {
      ctx.pool->parallel_for(tokens, rotate, grain);
    } else {
      rotate(0, tokens);
    }
  }

  std::string describe() const override { return "cpu"; }

 private:
  int64_t num_heads_;
  int64_t head_dim_;
  int64_t rotary_dim_;
  int64_t rotary_offset_;
  bool interleaved_;
  std::vector<double> inv_freq_;  // [rotary_dim / 2]
  double attention_factor_;
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
