// op "qk_norm_rope" (params: QkNormRopeParams): inputs (q [T, Hq * D], k [T, Hk * D],
// positions [T] I32, q_weight [D] or "", k_weight [D] or "") -> (q_out, k_out). See
// qk_norm_rope.h. CPU kernel: rms_norm's loop (rms_norm_cpu) into the output, then rope's
// (RopeCpu) in place on it (without the norm, rope's from the input), so the fused and unfused
// graphs compute the same floats.
#include <cmath>

#include "framework/compile/fuse_ops.h"
#include "framework/op/op_registry.h"
#include "ops/nn/nn_op_util.h"
#include "ops/nn/op_helpers.h"
#include "ops/nn/qk_norm_rope/qk_norm_rope.h"
#include "ops/nn/rms_norm/rms_norm_cpu.h"
#include "ops/nn/rope/rope.h"
#include "ops/nn/rope/rope_cpu.h"
#ifdef MG_WITH_CUDA
#include "ops/nn/qk_norm_rope/qk_norm_rope_cuda_kernel.h"
#endif

namespace mg {

namespace {

class QkNormRopeCpuKernel final : public OpKernel {
 public:
  explicit QkNormRopeCpuKernel(const proto::QkNormRopeParams& p)
      : head_dim_(p.rope().head_dim()),
        q_norm_(p.has_q_norm()),
        k_norm_(p.has_k_norm()),
        q_eps_(p.q_norm().eps()),
        k_eps_(p.k_norm().eps()),
        q_rope_(p.rope()),
        k_rope_(qk_norm_rope_k_rope(p)) {}

  // inputs: q [T, Hq * D], k [T, Hk * D], positions [T] I32, q_weight, k_weight [D] (optional).
  // outputs: q_out, k_out shaped as q, k.
  void run(const ExecContext& ctx, std::span<const Tensor> inputs,
           std::span<const Tensor> outputs) override {
    const int32_t* positions = inputs[2].data<int32_t>();
    const int64_t tokens = inputs[0].dim(0);
    auto one = [&](const Tensor& x, bool norm, const Tensor& weight, float eps, const RopeCpu& rope,
                   const Tensor& out) {
      float* y = out.data<float>();
      if (!norm) {
        rope.apply(x.data<float>(), positions, tokens, y, ctx.pool);
        return;
      }
      rms_norm_cpu(x.data<float>(), x.numel() / head_dim_, head_dim_,
                   weight.defined() ? weight.data<float>() : nullptr, eps, y, ctx.pool);
      rope.apply(y, positions, tokens, y, ctx.pool);
    };
    one(inputs[0], q_norm_, weight_input(inputs, 3), q_eps_, q_rope_, outputs[0]);
    one(inputs[1], k_norm_, weight_input(inputs, 4), k_eps_, k_rope_, outputs[1]);
  }

  std::string describe() const override { return "cpu"; }

 private:
  static Tensor weight_input(std::span<const Tensor> inputs, size_t i) {
    return i < inputs.size() ? inputs[i] : Tensor();
  }

  int64_t head_dim_;
  bool q_norm_;
  bool k_norm_;
  float q_eps_;
  float k_eps_;
  RopeCpu q_rope_;
  RopeCpu k_rope_;
};

class QkNormRopeOp final : public OpDef {
 public:
  std::string_view name() const override { return "qk_norm_rope"; }
  proto::Node::ParamsCase params_case() const override { return proto::Node::kQkNormRope; }
  std::span<const InputSpec> inputs() const override { return kInputs; }
  int num_outputs() const override { return 2; }

  std::vector<ValueType> infer(const proto::Node& node,
                               std::span<const std::optional<ValueType>> inputs) const override {
    const proto::QkNormRopeParams& p = node.qk_norm_rope();
    check_rope_params(p.rope());
    const int64_t head_dim = p.rope().head_dim();
    MG_CHECK(head_dim <= kQkNormRopeMaxHeadDim,
             "qk_norm_rope: head_dim {} exceeds {} (larger heads run as rms_norm and rope)",
             head_dim, kQkNormRopeMaxHeadDim);
    MG_CHECK(p.num_kv_heads() > 0, "qk_norm_rope: num_kv_heads must be positive, got {}",
             p.num_kv_heads());
    const ValueType& q = require_input(inputs, 0, "q");
    const ValueType& k = require_input(inputs, 1, "k");
    expect_rows(q, "qk_norm_rope: q");
    expect_rows(k, "qk_norm_rope: k");
    MG_CHECK(q.shape[1] == p.rope().num_heads() * head_dim,
             "qk_norm_rope: q must have rope.num_heads * head_dim = {} * {} = {} features, got {}",
             p.rope().num_heads(), head_dim, p.rope().num_heads() * head_dim, value_type_str(q));
    MG_CHECK(k.shape[1] == p.num_kv_heads() * head_dim,
             "qk_norm_rope: k must have num_kv_heads * head_dim = {} * {} = {} features, got {}",
             p.num_kv_heads(), head_dim, p.num_kv_heads() * head_dim, value_type_str(k));
    MG_CHECK(q.shape[0] == k.shape[0], "qk_norm_rope: q {} and k {} must have the same rows",
             value_type_str(q), value_type_str(k));
    expect_token_ids(require_input(inputs, 2, "positions"), "qk_norm_rope: positions");
    check_norm(p.has_q_norm(), p.q_norm(), "q_norm", head_dim, inputs, 3, "q_weight");
    check_norm(p.has_k_norm(), p.k_norm(), "k_norm", head_dim, inputs, 4, "k_weight");
    return {ValueType{DType::kF32, q.shape}, ValueType{DType::kF32, k.shape}};
  }

  std::unique_ptr<OpKernel> create_kernel(const KernelContext& ctx) const override {
    static constexpr size_t kFloatActivations[] = {0, 1};
#ifdef MG_WITH_CUDA
    if (ctx.options.device.is_cuda()) {
      return make_qk_norm_rope_cuda_kernel(ctx, ctx.node.qk_norm_rope());
    }
#endif
    expect_cpu_kernel(ctx, "qk_norm_rope", kFloatActivations);
    return std::make_unique<QkNormRopeCpuKernel>(ctx.node.qk_norm_rope());
  }

 private:
  // A norm that is set (`present`) is checked; one left unset takes no weight input.
  static void check_norm(bool present, const proto::RmsNormParams& n, std::string_view which,
                         int64_t head_dim, std::span<const std::optional<ValueType>> inputs,
                         size_t weight_index, std::string_view weight_name) {
    if (!present) {
      MG_CHECK(!has_input(inputs, weight_index),
               "qk_norm_rope: input {} ({}) is present but {} is unset (no norm)", weight_index,
               weight_name, which);
      return;
    }
    MG_CHECK(std::isfinite(n.eps()) && n.eps() > 0.0f,
             "qk_norm_rope: {}.eps must be positive and finite, got {} (unset eps reads as 0)",
             which, n.eps());
    MG_CHECK(n.group_size() == head_dim,
             "qk_norm_rope: {}.group_size must equal rope.head_dim {} (one group per head), got {}",
             which, head_dim, n.group_size());
    expect_present_iff(inputs, weight_index, n.has_weight(), "qk_norm_rope", weight_name,
                       fmt::format("{}.has_weight", which));
    if (n.has_weight()) {
      const std::string what = fmt::format("qk_norm_rope: {}", weight_name);
      expect_float(*inputs[weight_index], what);
      expect_shape(*inputs[weight_index], {head_dim}, what);
    }
  }

  static constexpr InputSpec kInputs[] = {
      {"q"},
      {"k"},
      {"positions"},
      {"q_weight", InputKind::kWeight, /*optional=*/true},
      {"k_weight", InputKind::kWeight, /*optional=*/true},
  };
};

}  // namespace

void register_qk_norm_rope(OpRegistry& registry) {
  registry.add(std::make_unique<QkNormRopeOp>());
  register_graph_rewrite("q/k rms_norm + rope -> qk_norm_rope", fuse_qk_norm_rope);
  register_graph_rewrite("q/k rope pair -> qk_norm_rope without norms", fuse_qk_rope);
}

}  // namespace mg
