// op "embedding": inputs (token_ids [T] I32, table [V, H]) -> out [T, H] = table[id] * scale.
#include <algorithm>
#include <cstring>

#include "framework/op/op_registry.h"
#include "ops/nn/embedding/embedding.h"
#include "ops/nn/nn_op_util.h"
#include "ops/nn/op_helpers.h"
#ifdef MG_WITH_CUDA
#include "ops/nn/cuda_kernels.h"
#endif

namespace mg {

void check_token_ids(const int32_t* token_ids, int64_t tokens, int64_t vocab) {
  for (int64_t t = 0; t < tokens; ++t) {
    const int32_t id = token_ids[t];
    MG_CHECK(id >= 0 && id < vocab,
             "embedding: token id {} (row {}) is out of range for a vocabulary of V = {}", id, t,
             vocab);
  }
}

namespace {

class EmbeddingCpuKernel final : public OpKernel {
 public:
  explicit EmbeddingCpuKernel(float scale) : scale_(scale) {}

  // inputs: token_ids [T] I32, table [V, H]. outputs: out [T, H].
  void run(const ExecContext& ctx, std::span<const Tensor> inputs,
           std::span<const Tensor> outputs) override {
    const int32_t* ids = inputs[0].data<int32_t>();
    const Tensor& table = inputs[1];
    const int64_t tokens = inputs[0].dim(0);
    const int64_t vocab = table.dim(0);
    const int64_t hidden = table.dim(1);
    // Validated up front: a throw inside a pool worker could not reach the caller.
    check_token_ids(ids, tokens, vocab);
    const float* rows = table.data<float>();
    float* out = outputs[0].data<float>();
    const float scale = scale_;
    auto gather = [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t) {
        const float* src = rows + static_cast<int64_t>(ids[t]) * hidden;
        float* dst = out + t * hidden;
        if (scale == 1.0f) {
          std::memcpy(dst, src, static_cast<size_t>(hidden) * sizeof(float));
        } else {
          for (int64_t h = 0; h < hidden; ++h) dst[h] = src[h] * scale;
        }
      }
    };
    const int64_t grain = std::max<int64_t>(1, (1 << 14) / std::max<int64_t>(1, hidden));
    if (ctx.pool) {
      ctx.pool->parallel_for(tokens, gather, grain);
    } else {
      gather(0, tokens);
    }
  }

  std::string describe() const override { return "cpu"; }

 private:
  float scale_;
};

class EmbeddingOp final : public OpDef {
 public:
  std::string_view name() const override { return "embedding"; }
  proto::Node::ParamsCase params_case() const override { return proto::Node::kEmbedding; }
  std::span<const InputSpec> inputs() const override { return kInputs; }
  int num_outputs() const override { return 1; }

  std::vector<ValueType> infer(const proto::Node& node,
                               std::span<const std::optional<ValueType>> inputs) const override {
    const proto::EmbeddingParams& p = node.embedding();
    if (p.has_scale()) expect_finite(p.scale(), "embedding", "scale");
    expect_token_ids(require_input(inputs, 0, "token_ids"), "embedding: token_ids");
    const ValueType& table = require_input(inputs, 1, "table");
    expect_float(table, "embedding: table");
    MG_CHECK(table.shape.size() == 2 && table.shape[0] > 0 && table.shape[1] > 0,
             "embedding: table must have shape [V, H] with V, H > 0, got {}",
             value_type_str(table));
    return {ValueType{DType::kF32, {kTokens, table.shape[1]}}};
  }

  std::unique_ptr<OpKernel> create_kernel(const KernelContext& ctx) const override {
    const proto::EmbeddingParams& p = ctx.node.embedding();
#ifdef MG_WITH_CUDA
    if (ctx.options.device.is_cuda()) {
      return make_embedding_cuda_kernel(ctx, p.has_scale() ? p.scale() : 1.0f);
    }
#endif
    expect_cpu_kernel(ctx, "embedding", {});
    return std::make_unique<EmbeddingCpuKernel>(p.has_scale() ? p.scale() : 1.0f);
  }

 private:
  static constexpr InputSpec kInputs[] = {
      {"token_ids"},
      {"table", InputKind::kWeight},
  };
};

}  // namespace

void register_embedding(OpRegistry& registry) {
  registry.add(std::make_unique<EmbeddingOp>());
}

}  // namespace mg
