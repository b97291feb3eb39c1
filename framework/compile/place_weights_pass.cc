// Pass 3: creates the plan's value table and places every weight a node reads: loaded from its
// safetensors file (zero-copy mmap), then, for consumers that want compute placement, converted
// to the activation dtype (F32 on the CPU, BF16/F16/F32 on CUDA: activation_dtype_of) and moved
// to the compile device once. Raw consumers (MoE experts) get the loaded tensor and convert it
// themselves in the next pass. With CompileOptions::random_weights the values are generated
// instead of loaded (large ones directly on the compile device).
#include <cmath>

#include "framework/compile/pass.h"
#include "framework/core/checked_math.h"
#include "framework/core/logging.h"
#include "framework/device/allocator.h"
#include "framework/device/convert.h"
#include "framework/device/random_fill.h"
#include "framework/io/proto_dtype.h"

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

// `raw` (host, or already on `device` for large random weights) as `dtype` on `device`.
Tensor place_for_compute(const Tensor& raw, DType dtype, Device device) {
  if (raw.device().is_cpu()) return to_device(cast_cpu(raw, dtype), device);
  if (raw.dtype() == dtype) return raw;
  Tensor out = empty_tensor(device, dtype, raw.shape());
  convert_tensor(out, raw, nullptr);
  return out;
}

// The weight `info` declares, filled from `seed` and its name (see CompileOptions::random_weights).
Tensor random_weight(const proto::TensorInfo& info, const Graph& graph, Device device,
                     uint64_t seed) {
  const DType dtype =
      from_proto(info.dtype(), fmt::format("{}: tensor '{}'", graph.file_label(), info.name()));
  MG_CHECK(dtype == DType::kF32 || dtype == DType::kF16 || dtype == DType::kBF16,
           "{}: random weights: tensor '{}' is {}; only F32, F16 and BF16 weights can be generated",
           graph.file_label(), info.name(), dtype_name(dtype));
  const Shape shape(info.shape().begin(), info.shape().end());
  // Checked here so that the error names the tensor; the shape is the graph's, unbounded.
  allocation_bytes(shape, dtype,
                   fmt::format("{}: random weights: tensor '{}'", graph.file_label(), info.name()));
  const int64_t numel = shape_numel(shape);
  const Device where = numel >= kDeviceRandomWeightElements ? device : Device::cpu();
  Tensor t = empty_tensor(where, dtype, shape);
  const bool matrix = shape.size() >= 2;
  const float scale = matrix ? 1.0f / std::sqrt(static_cast<float>(shape.back())) : 0.05f;
  fill_uniform(t, mix64(seed ^ fnv1a(info.name())), matrix ? 0.0f : 1.0f, scale, nullptr);
  return t;
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
    // --max-seq-len was range-checked by compile_model; the graph's own value is checked here.
    MG_CHECK(plan->max_seq_len <= kMaxSeqLen,
             "{}: info.max_seq_len {} is out of range [1, {}] (positions are 32-bit); pass a "
             "smaller --max-seq-len or fix the graph",
             graph.file_label(), plan->max_seq_len, kMaxSeqLen);

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
          const proto::TensorInfo& info = graph.model().tensors(graph.value(v.name).tensor_index);
          v.raw_weight =
              state.options.random_weights
                  ? random_weight(info, graph, state.options.device, *state.options.random_weights)
                  : state.weights->load(info);
        }
        if (specs[k].placement == WeightPlacement::kCompute && !v.weight.defined()) {
          v.weight = place_for_compute(v.raw_weight, compute_dtype, state.options.device);
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
