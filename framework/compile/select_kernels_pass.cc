// Pass 4: builds every node's kernel for the compile device. This is where MoE nodes run the
// oracle, convert their expert weights and build their runner (inside OpDef::create_kernel).
#include <string>
#include <vector>

#include "framework/compile/pass.h"
#include "framework/core/checked_math.h"
#include "framework/core/logging.h"
#include "framework/device/allocator.h"

namespace mg {

namespace {

class SelectKernelsPass final : public Pass {
 public:
  std::string_view name() const override { return "select-kernels"; }

  void run(CompileState& state) const override {
    const Graph& graph = state.graph;
    ExecutionPlan& plan = *state.plan;
    // Nodes still to build per value: a weight's loaded or generated tensors are dropped once the
    // last node that reads it has its kernel, so that a model's expert codes (random ones made on
    // the GPU, 15-60 GB) never sit whole beside the copies the backends repack them into.
    std::vector<int> readers(plan.values.size(), 0);
    for (int i : graph.order()) {
      for (const std::string& in : graph.node(i).inputs()) {
        const int v = in.empty() ? -1 : plan.find_value(in);
        if (v >= 0) ++readers[static_cast<size_t>(v)];
      }
    }
    for (int i : graph.order()) {
      const proto::Node& n = graph.node(i);
      const OpDef* def = OpRegistry::global().find(n.op());
      const auto specs = def->inputs();

      PlanNode node;
      node.graph_node = i;
      node.name = n.name();
      node.op = n.op();
      std::vector<std::optional<ValueType>> types(specs.size());
      std::vector<Tensor> weights(specs.size());
      std::vector<WeightQuantization> quant(specs.size());
      node.inputs.assign(specs.size(), -1);
      for (int k = 0; k < n.inputs_size(); ++k) {
        if (n.inputs(k).empty()) continue;
        const int v = plan.find_value(n.inputs(k));
        node.inputs[k] = v;
        const PlanValue& pv = plan.values[v];
        types[k] = input_view(pv.type, specs[k]);
        if (pv.source != ValueSource::kWeight) continue;
        quant[k] = pv.quant;  // undefined unless quantized
        if (pv.quant.defined() && specs[k].takes_quantized) {
          weights[k] = pv.raw_weight;
        } else if (specs[k].placement == WeightPlacement::kRaw) {
          weights[k] = pv.quant.defined() ? pv.dequantized : pv.raw_weight;
        } else {
          weights[k] = pv.weight;
        }
      }
      for (const std::string& out : n.outputs()) node.outputs.push_back(plan.find_value(out));

      KernelContext ctx{n, state.options, types, weights, quant};
      try {
        node.kernel = def->create_kernel(ctx);
      } catch (const Error& e) {
        throw Error(fmt::format("{}: {}", graph.node_label(i), e.what()));
      }
      node.workspace_bytes = node.kernel->workspace_bytes(plan.max_tokens);
      MG_CHECK(node.workspace_bytes <= kMaxAllocationBytes,
               "{}: max_tokens (--max-tokens) {} needs a workspace of {}, more than the {} one "
               "allocation may take; use fewer tokens per forward",
               graph.node_label(i), plan.max_tokens, byte_size_str(node.workspace_bytes),
               byte_size_str(kMaxAllocationBytes));
      plan.workspace_bytes = std::max(plan.workspace_bytes, node.workspace_bytes);
      for (const int v : node.inputs) {
        if (v < 0 || --readers[static_cast<size_t>(v)] > 0) continue;
        PlanValue& pv = plan.values[static_cast<size_t>(v)];
        if (pv.source != ValueSource::kWeight) continue;
        pv.raw_weight = Tensor();
        pv.dequantized = Tensor();
        pv.quant = WeightQuantization();
      }
      MG_LOG_DEBUG("compile", "{}: {}", graph.node_label(i), node.kernel->describe());
      plan.nodes.push_back(std::move(node));
    }
    // Kernels hold what they need; drop the plan's references to the loaded (mmapped) tensors.
    for (PlanValue& v : plan.values) {
      v.raw_weight = Tensor();
      v.dequantized = Tensor();
      v.quant = WeightQuantization();
    }
    // Builds may leave weight copies queued on the legacy default stream (cudaMemcpy between
    // device buffers returns before it is done); the forwards run on non-blocking streams, which
    // do not wait for that stream.
    synchronize_device(state.options.device);
  }
};

}  // namespace

std::unique_ptr<Pass> make_select_kernels_pass() {
  return std::make_unique<SelectKernelsPass>();
}

}  // namespace mg
