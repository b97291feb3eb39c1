#include "tests/testing/op_harness.h"

#include <gtest/gtest.h>

#include "framework/device/allocator.h"

namespace mg::testing {

namespace {

const OpDef& def_of(const proto::Node& node) {
  const OpDef* def = OpRegistry::global().find(node.op());
  MG_CHECK(def != nullptr, "unknown op '{}'", node.op());
  return *def;
}

std::vector<std::optional<ValueType>> types_of(const OpDef& def,
                                               const std::vector<Tensor>& inputs) {
  std::vector<std::optional<ValueType>> types;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined()) {
      types.emplace_back(std::nullopt);
      continue;
    }
    ValueType t{inputs[i].dtype(), inputs[i].shape()};
    const bool weight = i < def.inputs().size() && def.inputs()[i].kind == InputKind::kWeight;
    if (!weight && !t.shape.empty()) t.shape[0] = kTokens;
    types.emplace_back(std::move(t));
  }
  return types;
}

}  // namespace

std::vector<ValueType> infer_op(const proto::Node& node,
                                const std::vector<std::optional<ValueType>>& inputs) {
  return def_of(node).infer(node, inputs);
}

CompiledOp::CompiledOp(const proto::Node& node, const std::vector<Tensor>& inputs,
                       CompileOptions options, int threads)
    : node_(node), def_(&def_of(node)), options_(options) {
  const std::vector<std::optional<ValueType>> types = types_of(*def_, inputs);
  def_->infer(node_, types);
  placed_.resize(inputs.size());
  for (size_t i = 0; i < inputs.size() && i < def_->inputs().size(); ++i) {
    const InputSpec& spec = def_->inputs()[i];
    if (spec.kind != InputKind::kWeight || !inputs[i].defined()) continue;
    placed_[i] = spec.placement == WeightPlacement::kRaw ? inputs[i] : to_f32_cpu(inputs[i]);
  }
  KernelContext ctx{node_, options_, types, placed_};
  kernel_ = def_->create_kernel(ctx);
  state_ = kernel_->create_state(
      StateOptions{options_.device, options_.max_seq_len > 0 ? options_.max_seq_len : 256});
  pool_ = std::make_unique<ThreadPool>(threads);
}

std::vector<Tensor> CompiledOp::run(const std::vector<Tensor>& inputs) {
  const std::vector<std::optional<ValueType>> types = types_of(*def_, inputs);
  const std::vector<ValueType> out_types = def_->infer(node_, types);
  int64_t tokens = 0;
  std::vector<Tensor> args(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    args[i] = placed_[i].defined() ? placed_[i] : inputs[i];
    const bool weight = i < def_->inputs().size() && def_->inputs()[i].kind == InputKind::kWeight;
    if (!weight && inputs[i].defined() && inputs[i].rank() > 0) tokens = inputs[i].dim(0);
  }
  std::vector<Tensor> outputs;
  for (const ValueType& t : out_types) {
    Shape s = t.shape;
    if (!s.empty() && s[0] == kTokens) s[0] = tokens;
    outputs.push_back(Tensor::empty_cpu(t.dtype, s));
  }
  const size_t ws_bytes = kernel_->workspace_bytes(tokens);
  Tensor workspace = Tensor::empty_cpu(DType::kU8, {static_cast<int64_t>(ws_bytes)});
  auto stream = make_stream(options_.device);
  ExecContext ctx;
  ctx.device = options_.device;
  ctx.stream = stream.get();
  ctx.pool = pool_.get();
  ctx.state = state_.get();
  ctx.workspace = ws_bytes ? workspace.raw() : nullptr;
  ctx.workspace_bytes = ws_bytes;
  kernel_->run(ctx, args, outputs);
  return outputs;
}

std::vector<Tensor> run_cpu_op(const proto::Node& node, const std::vector<Tensor>& inputs,
                               int threads) {
  CompiledOp op(node, inputs, CompileOptions{}, threads);
  return op.run(inputs);
}

}  // namespace mg::testing
