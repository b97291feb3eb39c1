// op "attention": inputs (q [T, H*D], k [T, KV*D], v [T, KV*Dv], positions [T] I32,
// sinks [H] or "") -> out [T, H*Dv]. The KV cache is per-session state: K [rows, KV, D], V
// [rows, KV, Dv], rows = max_seq_len (one contiguous sequence) or kv_blocks * kv_block_size (the
// paged cache of several sequences; ExecContext::kv says which rows belong to whom).
//
// CPU kernel: write this call's keys and values at their positions, then attention_cpu
// (attention_cpu.h) over the cache.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "framework/op/op_registry.h"
#include "ops/nn/attention/attention_cpu.h"
#include "ops/nn/nn_op_util.h"
#include "ops/nn/op_helpers.h"
#ifdef MG_WITH_CUDA
#include "ops/nn/cuda_kernels.h"
#endif

namespace mg {

namespace {

class AttentionState final : public OpState {
 public:
  AttentionState(int64_t rows, int64_t kv_heads, int64_t head_dim, int64_t v_head_dim)
      : rows(rows),
        k(Tensor::empty_cpu(DType::kF32, {rows, kv_heads, head_dim})),
        v(Tensor::empty_cpu(DType::kF32, {rows, kv_heads, v_head_dim})) {}

  const int64_t rows;
  Tensor k;  // [rows, KV, D]
  Tensor v;  // [rows, KV, Dv]
};

class AttentionCpuKernel final : public OpKernel {
 public:
  explicit AttentionCpuKernel(const AttentionDims& dims) : dims_(dims) {}

  // inputs: q [T, H*D], k [T, KV*D], v [T, KV*Dv], positions [T] I32, sinks [H] (optional).
  // outputs: out [T, H*Dv].
  void run(const ExecContext& ctx, std::span<const Tensor> inputs,
           std::span<const Tensor> outputs) override {
    auto* state = dynamic_cast<AttentionState*>(ctx.state);
    MG_ASSERT(state != nullptr, "attention: run without the KV-cache state of create_state()");
    const AttentionDims& dm = dims_;
    const int64_t tokens = inputs[0].dim(0);
    const int32_t* positions = inputs[3].data<int32_t>();
    const KvBatch* kv = ctx.kv;
    const bool paged = kv != nullptr && kv->block_tables != nullptr;
    // Positions one sequence may reach: its block table's span, or the contiguous cache.
    const int64_t max_positions = paged ? kv->max_blocks_per_seq * kv->block_size : state->rows;
    MG_ASSERT(!paged || kv->num_blocks * kv->block_size == state->rows,
              "attention: the batch's {} blocks of {} positions are not the state's {} rows",
              kv->num_blocks, kv->block_size, state->rows);
    const int32_t* row_slots = kv != nullptr ? kv->row_slots : nullptr;

    // Append this call's keys and values: the cache row of (slot, position) holds that token's.
    const int64_t k_row = dm.kv_heads * dm.head_dim;
    const int64_t v_row = dm.kv_heads * dm.v_head_dim;
    float* k_cache = state->k.data<float>();
    float* v_cache = state->v.data<float>();
    const float* k_new = inputs[1].data<float>();
    const float* v_new = inputs[2].data<float>();
    for (int64_t t = 0; t < tokens; ++t) {
      MG_CHECK(positions[t] >= 0, "attention: position {} (row {}) is negative", positions[t], t);
      MG_CHECK(positions[t] < max_positions,
               "attention: position {} (row {}) is past the KV cache, which holds max_seq_len = {} "
               "positions per sequence",
               positions[t], t, max_positions);
      const int64_t slot = row_slots ? row_slots[t] : 0;
      const int64_t row = kv_cache_row(kv, slot, positions[t]);
      MG_CHECK(row >= 0 && row < state->rows,
               "attention: position {} of sequence slot {} (row {}) has no KV-cache block",
               positions[t], slot, t);
      std::memcpy(k_cache + row * k_row, k_new + t * k_row,
                  static_cast<size_t>(k_row) * sizeof(float));
      std::memcpy(v_cache + row * v_row, v_new + t * v_row,
                  static_cast<size_t>(v_row) * sizeof(float));
    }

    const float* sinks =
        inputs.size() > 4 && inputs[4].defined() ? inputs[4].data<float>() : nullptr;
    attention_cpu(dm, inputs[0].data<float>(), positions, tokens, k_cache, v_cache, sinks,
                  outputs[0].data<float>(), ctx.pool, kv);
  }

  std::unique_ptr<OpState> create_state(const StateOptions& options) const override {
    MG_CHECK(options.device.is_cpu(), "op attention has no KV cache for {}", options.device.str());
    return std::make_unique<AttentionState>(kv_cache_rows(options), dims_.kv_heads, dims_.head_dim,
                                            dims_.v_head_dim);
  }

  std::string describe() const override { return "cpu"; }

 private:
  AttentionDims dims_;
};

class AttentionOp final : public OpDef {
 public:
  std::string_view name() const override { return "attention"; }
  proto::Node::ParamsCase params_case() const override { return proto::Node::kAttention; }
  std::span<const InputSpec> inputs() const override { return kInputs; }
  int num_outputs() const override { return 1; }

  std::vector<ValueType> infer(const proto::Node& node,
                               std::span<const std::optional<ValueType>> inputs) const override {
    const proto::AttentionParams& p = node.attention();
    MG_CHECK(p.num_heads() > 0, "attention: num_heads must be positive, got {}", p.num_heads());
    MG_CHECK(p.num_kv_heads() > 0, "attention: num_kv_heads must be positive, got {}",
             p.num_kv_heads());
    MG_CHECK(p.num_heads() % p.num_kv_heads() == 0,
             "attention: num_heads {} is not divisible by num_kv_heads {}", p.num_heads(),
             p.num_kv_heads());
    MG_CHECK(p.head_dim() > 0, "attention: head_dim must be positive, got {}", p.head_dim());
    MG_CHECK(p.v_head_dim() >= 0, "attention: v_head_dim {} must be >= 0 (0 means head_dim)",
             p.v_head_dim());
    if (p.has_scale()) expect_finite(p.scale(), "attention", "scale");
    MG_CHECK(p.sliding_window() >= 0, "attention: sliding_window {} must be >= 0 (0: off)",
             p.sliding_window());
    MG_CHECK(p.chunk_size() >= 0, "attention: chunk_size {} must be >= 0 (0: off)", p.chunk_size());
    const int64_t v_head_dim = p.v_head_dim() == 0 ? p.head_dim() : p.v_head_dim();

    auto expect_heads = [&](size_t index, const char* what, const char* heads_name, int64_t heads,
                            const char* dim_name, int64_t dim) {
      const ValueType& type = require_input(inputs, index, what);
      const std::string label = fmt::format("attention: {}", what);
      expect_rows(type, label);
      MG_CHECK(type.shape[1] == heads * dim,
               "attention: {} must have {} * {} = {} * {} = {} features, got {}", what, heads_name,
               dim_name, heads, dim, heads * dim, value_type_str(type));
    };
    expect_heads(0, "q", "num_heads", p.num_heads(), "head_dim", p.head_dim());
    expect_heads(1, "k", "num_kv_heads", p.num_kv_heads(), "head_dim", p.head_dim());
    expect_heads(2, "v", "num_kv_heads", p.num_kv_heads(), "v_head_dim", v_head_dim);
    expect_token_ids(require_input(inputs, 3, "positions"), "attention: positions");
    expect_present_iff(inputs, 4, p.has_sinks(), "attention", "sinks", "has_sinks");
    if (p.has_sinks()) {
      expect_float(*inputs[4], "attention: sinks");
      expect_shape(*inputs[4], {p.num_heads()}, "attention: sinks");
    }
    return {ValueType{DType::kF32, {kTokens, p.num_heads() * v_head_dim}}};
  }

  std::unique_ptr<OpKernel> create_kernel(const KernelContext& ctx) const override {
    static constexpr size_t kFloatActivations[] = {0, 1, 2};
    const proto::AttentionParams& p = ctx.node.attention();
    AttentionDims dims;
    dims.heads = p.num_heads();
    dims.kv_heads = p.num_kv_heads();
    dims.head_dim = p.head_dim();
    dims.v_head_dim = p.v_head_dim() == 0 ? p.head_dim() : p.v_head_dim();
    dims.scale = p.has_scale()
                     ? p.scale()
                     : static_cast<float>(1.0 / std::sqrt(static_cast<double>(p.head_dim())));
    dims.sliding_window = p.sliding_window();
    dims.chunk_size = p.chunk_size();
#ifdef MG_WITH_CUDA
    if (ctx.options.device.is_cuda()) return make_attention_cuda_kernel(ctx, dims);
#endif
    expect_cpu_kernel(ctx, "attention", kFloatActivations);
    return std::make_unique<AttentionCpuKernel>(dims);
  }

 private:
  static constexpr InputSpec kInputs[] = {
      {"q"}, {"k"}, {"v"}, {"positions"}, {"sinks", InputKind::kWeight, /*optional=*/true},
  };
};

}  // namespace

void register_attention(OpRegistry& registry) {
  registry.add(std::make_unique<AttentionOp>());
}

}  // namespace mg
