// op "attn_temperature": inputs (x [T, D], positions [T] I32) -> out [T, D],
// out[t] = x[t] * (1 + attn_scale * log1p(floor((positions[t] + 1) / floor_scale))).
// HF computes the multiplier with fp32 tensor ops; here it is computed in fp64 and rounded to
// fp32 (attn_temperature_factor: within an ulp of HF's), then the queries are multiplied by it in
// fp32. The CUDA kernel computes the same factor bit for bit.
#include <algorithm>
#include <cmath>

#include "framework/op/op_registry.h"
#include "ops/nn/attn_temperature/attn_temperature.h"
#include "ops/nn/nn_op_util.h"
#include "ops/nn/op_helpers.h"
#ifdef MG_WITH_CUDA
#include "ops/nn/cuda_kernels.h"
#endif

namespace mg {

double attn_temperature_factor(int64_t position, double attn_scale, double floor_scale) {
  return std::log1p(std::floor((static_cast<double>(position) + 1.0) / floor_scale)) * attn_scale +
         1.0;
}

namespace {

class AttnTemperatureCpuKernel final : public OpKernel {
 public:
  AttnTemperatureCpuKernel(float attn_scale, float floor_scale)
      : attn_scale_(attn_scale), floor_scale_(floor_scale) {}

  void run(const ExecContext& ctx, std::span<const Tensor> inputs,
           std::span<const Tensor> outputs) override {
    const int64_t tokens = inputs[0].dim(0);
    const int64_t dim = inputs[0].dim(1);
    const float* x = inputs[0].data<float>();
    const int32_t* positions = inputs[1].data<int32_t>();
    for (int64_t t = 0; t < tokens; ++t) {
      MG_CHECK(positions[t] >= 0, "attn_temperature: position {} (row {}) is negative",
               positions[t], t);
    }
    float* out = outputs[0].data<float>();
    auto scale_rows = [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t) {
        const float factor =
            static_cast<float>(attn_temperature_factor(positions[t], attn_scale_, floor_scale_));
        for (int64_t i = 0; i < dim; ++i) out[t * dim + i] = x[t * dim + i] * factor;
      }
    };
    const int64_t grain = std::max<int64_t>(1, (1 << 14) / std::max<int64_t>(1, dim));
    if (ctx.pool) {
      ctx.pool->parallel_for(tokens, scale_rows, grain);
    } else {
      scale_rows(0, tokens);
    }
  }

  std::string describe() const override { return "cpu"; }

 private:
  float attn_scale_;
  float floor_scale_;
};

class AttnTemperatureOp final : public OpDef {
 public:
  std::string_view name() const override { return "attn_temperature"; }
  proto::Node::ParamsCase params_case() const override { return proto::Node::kAttnTemperature; }
  std::span<const InputSpec> inputs() const override { return kInputs; }
  int num_outputs() const override { return 1; }

  std::vector<ValueType> infer(const proto::Node& node,
                               std::span<const std::optional<ValueType>> inputs) const override {
    const proto::AttnTemperatureParams& p = node.attn_temperature();
    expect_finite(p.attn_scale(), "attn_temperature", "attn_scale");
    MG_CHECK(std::isfinite(p.floor_scale()) && p.floor_scale() > 0.0f,
             "attn_temperature: floor_scale must be positive and finite, got {}", p.floor_scale());
    const ValueType& x = require_input(inputs, 0, "x");
    expect_rows(x, "attn_temperature: x");
    expect_token_ids(require_input(inputs, 1, "positions"), "attn_temperature: positions");
    return {ValueType{DType::kF32, x.shape}};
  }

  std::unique_ptr<OpKernel> create_kernel(const KernelContext& ctx) const override {
    static constexpr size_t kFloatActivations[] = {0};
    const proto::AttnTemperatureParams& p = ctx.node.attn_temperature();
#ifdef MG_WITH_CUDA
    if (ctx.options.device.is_cuda()) {
      return make_attn_temperature_cuda_kernel(ctx, p.attn_scale(), p.floor_scale());
    }
#endif
    expect_cpu_kernel(ctx, "attn_temperature", kFloatActivations);
    return std::make_unique<AttnTemperatureCpuKernel>(p.attn_scale(), p.floor_scale());
  }

 private:
  static constexpr InputSpec kInputs[] = {{"x"}, {"positions"}};
};

}  // namespace

void register_attn_temperature(OpRegistry& registry) {
  registry.add(std::make_unique<AttnTemperatureOp>());
}

}  // namespace mg
