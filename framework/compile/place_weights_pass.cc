// Pass 3: creates the plan's value table and places every weight a node reads: loaded from its
// safetensors file (zero-copy mmap), then, for consumers that want compute placement, converted
// to the activation dtype (F32 on the CPU, BF16/F16/F32 on CUDA: activation_dtype_of) and moved
// to the compile device once. Raw consumers (MoE experts) get the loaded tensor and convert it
// themselves in the next pass.
#include "framework/compile/pass.h"
#include "framework/core/logging.h"
#include "framework/device/allocator.h"
#include "framework/device/convert.h"

namespace mg {

namespace {

int add_value(ExecutionPlan& plan, const Graph& graph, const std::string& name) {
  const int existing = plan.find_value(name);
  if (existing >= 0) return existing;
  const GraphValue& gv = graph.value(name);
  PlanValue v;
  v.name = name;
  v.type = *gv.type;
  v.source = gv.source;
  plan.values.push_back(std::move(v));
  return static_cast<int>(plan.values.size()) - 1;
}

Tensor to_device(const Tensor& host, Device device) {
  if (device.is_cpu()) return host;
  Tensor out = empty_tensor(device, host.dtype(), host.shape());
  copy_tensor(out, host);
  return out;
}

class PlaceWeightsPass final : public Pass {
 public:
  std::string_view name() const override { return "place-weights"; }

  void run(CompileState& state) const override {
    const Graph& graph = state.graph;
    const DType compute_dtype = activation_dtype_of(state.options);
    auto plan = std::make_unique<ExecutionPlan>();
    plan->model_name = graph.model().name();
    plan->info = graph.model().info();
    plan->device = state.options.device;
    plan->max_tokens = state.options.max_tokens;
    plan->max_seq_len = state.options.max_seq_len > 0 ? state.options.max_seq_len
                                                      : graph.model().info().max_seq_len();
    MG_CHECK(plan->max_seq_len > 0,
             "{}: the model declares no info.max_seq_len; pass a maximum sequence length",
             graph.file_label());

    for (const proto::ValueInfo& in : graph.model().inputs()) add_value(*plan, graph, in.name());
    size_t placed_bytes = 0;
    for (int i : graph.order()) {
      const proto::Node& n = graph.node(i);
      const auto specs = OpRegistry::global().find(n.op())->inputs();
      for (int k = 0; k < n.inputs_size(); ++k) {
        if (n.inputs(k).empty()) continue;
        PlanValue& v = plan->values[add_value(*plan, graph, n.inputs(k))];
        if (v.source != ValueSource::kWeight) continue;
        if (!v.raw_weight.defined()) {
          const GraphValue& gv = graph.value(v.name);
          v.raw_weight = state.weights->load(graph.model().tensors(gv.tensor_index));
        }
        if (specs[k].placement == WeightPlacement::kCompute && !v.weight.defined()) {
          v.weight = to_device(cast_cpu(v.raw_weight, compute_dtype), state.options.device);
          placed_bytes += v.weight.nbytes();
        }
      }
      for (const std::string& out : n.outputs()) add_value(*plan, graph, out);
    }
    MG_LOG_INFO("compile", "{}: placed {:.1f} MiB of {} weights on {}", graph.file_label(),
                placed_bytes / 1048576.0, dtype_name(compute_dtype), state.options.device.str());
    state.plan = std::move(plan);
  }
};

}  // namespace

std::unique_ptr<Pass> make_place_weights_pass() {
  return std::make_unique<PlaceWeightsPass>();
}

}  // namespace mg
