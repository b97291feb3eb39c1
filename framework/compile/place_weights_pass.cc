// Pass 3: creates the plan's value table and places every weight a node reads: loaded from its
// safetensors file (zero-copy mmap), then, for consumers that want compute placement, converted
// to the activation dtype (F32 on the CPU, BF16/F16/F32 on CUDA: activation_dtype_of) and moved
// to the compile device once. Raw consumers (MoE experts) get the loaded tensor and convert it
// themselves in the next pass. With CompileOptions::random_weights the values are generated
// instead of loaded (large ones directly on the compile device).
#include <algorithm>
#include <cmath>

#include "framework/compile/pass.h"
#include "framework/compile/random_quantized_weights.h"
#include "framework/core/checked_math.h"
#include "framework/core/fp4.h"
#include "framework/core/fp8.h"
#include "framework/core/int_quant.h"
#include "framework/core/logging.h"
#include "framework/core/quant.h"
#include "framework/device/allocator.h"
#include "framework/device/convert.h"
#include "framework/device/random_fill.h"
#include "framework/graph/int_tensor_quantization.h"
#include "framework/graph/tensor_quantization.h"
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

// `raw` (host, or already on `device` for large random weights) as `dtype` on `device`.
Tensor place_for_compute(const Tensor& raw, DType dtype, Device device) {
  if (raw.device().is_cpu()) return to_device_tensor(cast_cpu(raw, dtype), device);
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

// (fp4) The effective F32 group scales of FP4 weight `info` (E8M0 decoded, NVFP4's global scale
// applied); a NaN scale (E8M0 0xFF) is an error naming the tensor. `global_out`: the global scale
// as a multiplier (WeightQuantization::global_scale), or undefined.
Tensor load_fp4_scales(const proto::TensorInfo& info, const Graph& graph, CompileState& state,
                       Tensor& global_out) {
  const proto::TensorQuantization& q = info.quantization();
  const Tensor raw =
      state.weights->load(graph.model().tensors(graph.value(q.scale()).tensor_index));
  Tensor global;
  if (!q.global_scale().empty()) {
    global = state.weights->load(graph.model().tensors(graph.value(q.global_scale()).tensor_index));
  }
  // ModelOpt's global scale multiplies, compressed-tensors' divides (global_scale_divides).
  Tensor scale = fp4_group_scales_f32(raw, global, q.global_scale_divides());
  if (global.defined()) {
    const Tensor g = to_f32_cpu(global);
    global_out = Tensor::empty_cpu(DType::kF32, g.shape());
    for (int64_t i = 0; i < g.numel(); ++i) {
      const float f = g.data<float>()[i];
      global_out.data<float>()[i] = q.global_scale_divides() ? 1.0f / f : f;
    }
  }
  const float* s = scale.data<float>();
  for (int64_t i = 0; i < scale.numel(); ++i) {
    MG_CHECK(std::isfinite(s[i]) && s[i] >= 0.0f,
             "{}: tensor '{}': scale {} of '{}'{} is {} (E8M0 0xFF is NaN; scales must be finite "
             "and not negative)",
             graph.file_label(), info.name(), i, q.scale(),
             q.global_scale().empty() ? "" : fmt::format(" with global '{}'", q.global_scale()),
             s[i]);
  }
  return scale;
}

// Integer weight-only codes (W4A16 / W8A16): loaded in the checkpoint's packing and converted
// once into the canonical layout (framework/core/int_quant.h), or generated: random values like
// random_weight's quantized as quantize_int_cpu does (random_int_weight).
void load_int_quantized(PlanValue& v, const proto::TensorInfo& info, const Graph& graph,
                        CompileState& state, Device random_where) {
  const proto::TensorQuantization& pq = info.quantization();
  const ValueType& type = *graph.value(v.name).type;
  if (state.options.random_weights) {
    std::tie(v.raw_weight, v.quant) =
        random_int_weight(info, type.shape, type.quant_element, type.quant_group->cols,
                          *state.options.random_weights, random_where);
    return;
  }
  auto load_named = [&](const std::string& name) {
    return state.weights->load(graph.model().tensors(graph.value(name).tensor_index));
  };
  StoredIntWeight w;
  w.element = type.quant_element;
  w.packing = int_packing_from_proto(pq.packing());
  w.logical_shape = type.shape;
  w.group_cols = type.quant_group->cols;
  w.codes = state.weights->load(info);
  w.scale = load_named(pq.scale());
  if (!pq.zero_point().empty()) w.zero_point = load_named(pq.zero_point());
  if (!pq.g_idx().empty()) w.g_idx = load_named(pq.g_idx());
  w.zero_point_offset = pq.zero_point_offset();
  w.what = fmt::format("{}: tensor '{}'", graph.file_label(), info.name());
  std::tie(v.raw_weight, v.quant) = convert_int_weight(w);
}

// Loads (or generates) quantized weight `info` into `v`: codes in raw_weight, scales in quant.
// Random integer and FP4 codes are made on `random_where` (the host, or the GPU their consumer
// repacks them on).
void load_quantized(PlanValue& v, const proto::TensorInfo& info, const Graph& graph,
                    CompileState& state, Device random_where) {
  if (is_integer_quant_element(info.quantization().element())) {
    load_int_quantized(v, info, graph, state, random_where);
    return;
  }
  const GroupShape group = *graph.value(v.name).type->quant_group;
  if (is_fp4_quantization(info.quantization())) {
    if (state.options.random_weights) {
      // Scales with the checkpoint's bytes (E8M0: MXFP4; F8_E4M3 x global: NVFP4), as a real one.
      const proto::TensorInfo& scale_info =
          graph.model().tensors(graph.value(info.quantization().scale()).tensor_index);
      const DType scale_dtype =
          from_proto(scale_info.dtype(),
                     fmt::format("{}: tensor '{}'", graph.file_label(), scale_info.name()));
      const Fp4ScaleGrid grid = scale_dtype == DType::kU8       ? Fp4ScaleGrid::kE8M0
                                : scale_dtype == DType::kF8E4M3 ? Fp4ScaleGrid::kE4M3
                                                                : Fp4ScaleGrid::kF32;
      std::tie(v.raw_weight, v.quant) =
          random_fp4_weight(info, group, *state.options.random_weights, random_where, grid);
    } else {
      v.raw_weight = state.weights->load(info);
      v.quant.scale = load_fp4_scales(info, graph, state, v.quant.global_scale);
      v.quant.group = group;
    }
    v.quant.element = QuantElement::kFp4E2M1;
  } else if (state.options.random_weights) {
    std::tie(v.raw_weight, v.quant) = random_fp8_weight(info, group, *state.options.random_weights);
  } else {
    v.raw_weight = state.weights->load(info);
    const GraphValue& scale = graph.value(info.quantization().scale());
    v.quant.scale = to_f32_cpu(state.weights->load(graph.model().tensors(scale.tensor_index)));
    v.quant.group = group;
  }
  v.quant.activation = activation_quant_of(info.quantization());
  v.quant.activation_group = info.quantization().activation_group();
  if (v.quant.activation == ActivationQuant::kStatic) {
    if (state.options.random_weights) {
      // A scale near what calibration of unit-scale activations gives (amax ~4 / 448).
      v.quant.activation_scale = Tensor::empty_cpu(DType::kF32, {1});
      v.quant.activation_scale.data<float>()[0] = 4.0f / kFp8E4M3Max;
    } else {
      const GraphValue& s = graph.value(info.quantization().activation_scale());
      v.quant.activation_scale =
          to_f32_cpu(state.weights->load(graph.model().tensors(s.tensor_index)));
    }
  }
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
    int dequantized = 0;
    for (int i : graph.order()) {
      const proto::Node& n = graph.node(i);
      const auto specs = OpRegistry::global().find(n.op())->inputs();
      for (int k = 0; k < n.inputs_size(); ++k) {
        if (n.inputs(k).empty()) continue;
        PlanValue& v = plan->values[add_value(*plan, graph, n.inputs(k))];
        if (v.source != ValueSource::kWeight) continue;
        const proto::TensorInfo& info = graph.model().tensors(graph.value(v.name).tensor_index);
        if (!v.raw_weight.defined()) {
          if (info.has_quantization()) {
            // Random codes of inputs that can take them on a GPU are made there (the MoE op's
            // experts: the oracle hands them to cuda_wna16 / cuda_fp4, which repack them in
            // place; any other backend gets a host copy), so a 15-60 GB model never passes
            // through host memory.
            const bool on_gpu = state.options.device.is_cuda() && specs[k].random_codes_on_device &&
                                specs[k].takes_quantized &&
                                shape_numel(Shape(info.shape().begin(), info.shape().end())) >=
                                    kDeviceRandomWeightElements;
            load_quantized(v, info, graph, state, on_gpu ? state.options.device : Device::cpu());
          } else {
            v.raw_weight = state.options.random_weights
                               ? random_weight(info, graph, state.options.device,
                                               *state.options.random_weights)
                               : state.weights->load(info);
          }
        }
        if (v.quant.defined()) {
          if (specs[k].takes_quantized) continue;
          if (!v.dequantized.defined()) {
            v.dequantized = dequantize_cpu(v.raw_weight, v.quant);
            ++dequantized;
          }
        }
        const Tensor& raw = v.quant.defined() ? v.dequantized : v.raw_weight;
        if (specs[k].placement == WeightPlacement::kCompute && !v.weight.defined()) {
          v.weight = place_for_compute(raw, compute_dtype, state.options.device);
          placed_bytes += v.weight.nbytes();
        }
      }
      for (const std::string& out : n.outputs()) add_value(*plan, graph, out);
    }
    MG_LOG_INFO("compile", "{}: placed {:.1f} MiB of {} weights on {}", graph.file_label(),
                placed_bytes / 1048576.0, dtype_name(compute_dtype), state.options.device.str());
    if (dequantized > 0) {
      MG_LOG_INFO("compile",
                  "{}: dequantized {} quantized weights for ops without a quantized kernel",
                  graph.file_label(), dequantized);
    }
    state.plan = std::move(plan);
  }
};

}  // namespace

std::unique_ptr<Pass> make_place_weights_pass() {
  return std::make_unique<PlaceWeightsPass>();
}

}  // namespace mg
