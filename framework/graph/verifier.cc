#include "framework/graph/verifier.h"

#include <queue>
#include <unordered_set>

#include "framework/core/fp4.h"
#include "framework/core/int_quant.h"
#include "framework/graph/int_tensor_quantization.h"
#include "framework/graph/tensor_quantization.h"
#include "framework/io/proto_dtype.h"

namespace mg {

namespace {

std::string params_case_name(proto::Node::ParamsCase c) {
  if (c == proto::Node::PARAMS_NOT_SET) return "none";
  const auto* field = proto::Node::descriptor()->FindFieldByNumber(static_cast<int>(c));
  return field ? field->name() : "?";
}

Shape shape_from_proto(const google::protobuf::RepeatedField<int64_t>& dims) {
  Shape s;
  for (int64_t d : dims) s.push_back(d < 0 ? kTokens : d);
  return s;
}

// A graph input's or output's shape: each dimension is -1 (the token count T) or a size >= 0.
void check_declared_shape(const proto::ValueInfo& v, std::string_view file, std::string_view what) {
  for (int i = 0; i < v.shape_size(); ++i) {
    MG_CHECK(v.shape(i) >= -1,
             "{}: {} '{}' has dimension {} = {} in its shape (expected -1 for the token count "
             "T, or a size >= 0)",
             file, what, v.name(), i, v.shape(i));
  }
}

void add_declared_values(Graph& graph, std::unordered_map<std::string, GraphValue>& values) {
  const proto::Model& m = graph.model();
  const std::string file = graph.file_label();
  for (const proto::ValueInfo& in : m.inputs()) {
    MG_CHECK(!in.name().empty(), "{}: a graph input has no name", file);
    MG_CHECK(!values.contains(in.name()), "{}: graph input '{}' is declared twice", file,
             in.name());
    check_declared_shape(in, file, "graph input");
    GraphValue v;
    v.name = in.name();
    v.source = ValueSource::kGraphInput;
    v.type = ValueType{from_proto(in.dtype(), fmt::format("{}: graph input '{}'", file, in.name())),
                       shape_from_proto(in.shape())};
    values.emplace(in.name(), std::move(v));
  }
  for (int i = 0; i < m.tensors_size(); ++i) {
    const proto::TensorInfo& t = m.tensors(i);
    MG_CHECK(!t.name().empty(), "{}: tensor #{} has no name", file, i);
    MG_CHECK(!values.contains(t.name()),
             "{}: tensor '{}' is declared twice (or clashes with a "
             "graph input)",
             file, t.name());
    for (int64_t d : t.shape()) {
      MG_CHECK(d >= 0, "{}: tensor '{}' has a negative dimension in its shape", file, t.name());
    }
    MG_CHECK(!t.file().empty(), "{}: tensor '{}' names no weight file", file, t.name());
    GraphValue v;
    v.name = t.name();
    v.source = ValueSource::kWeight;
    v.tensor_index = i;
    v.type = ValueType{from_proto(t.dtype(), fmt::format("{}: tensor '{}'", file, t.name())),
                       Shape(t.shape().begin(), t.shape().end())};
    values.emplace(t.name(), std::move(v));
  }
  // Quantized tensors, once every scale tensor they may name is declared.
  for (const proto::TensorInfo& t : m.tensors()) {
    if (!t.has_quantization()) continue;
    if (is_integer_quant_element(t.quantization().element())) {
      ValueType& type = *values.at(t.name()).type;
      const IntQuantizationInfo info = check_int_tensor_quantization(
          m, t,
          [&](const std::string& name) {
            auto it = values.find(name);
            return it != values.end() && it->second.source == ValueSource::kWeight
                       ? &m.tensors(it->second.tensor_index)
                       : nullptr;
          },
          file);
      type.quant_group = info.group;
      type.quant_element = info.element;
      type.dtype = int_codes_dtype(info.element);
      type.shape = info.logical_shape;
      continue;
    }
    auto scale = values.find(t.quantization().scale());
    const proto::TensorInfo* scale_info =
        scale != values.end() && scale->second.source == ValueSource::kWeight
            ? &m.tensors(scale->second.tensor_index)
            : nullptr;
    auto act_scale = t.quantization().activation_scale().empty()
                         ? values.end()
                         : values.find(t.quantization().activation_scale());
    const proto::TensorInfo* act_scale_info =
        act_scale != values.end() && act_scale->second.source == ValueSource::kWeight
            ? &m.tensors(act_scale->second.tensor_index)
            : nullptr;
    ValueType& type = *values.at(t.name()).type;
    type.quant_group = check_tensor_quantization(m, t, scale_info, file, act_scale_info);
    // Packed FP4 codes (two per U8 byte): ops see the logical shape.
    if (is_fp4_quantization(t.quantization())) {
      type.shape = fp4_logical_shape(type.shape);
      type.quant_element = QuantElement::kFp4E2M1;
    }
    if (!t.quantization().global_scale().empty()) {
      auto global = values.find(t.quantization().global_scale());
      check_fp4_global_scale(t,
                             global != values.end() && global->second.source == ValueSource::kWeight
                                 ? &m.tensors(global->second.tensor_index)
                                 : nullptr,
                             file);
    }
  }
}

// Checks one node against its op's schema and records its outputs.
void check_node(Graph& graph, int i, std::unordered_map<std::string, GraphValue>& values) {
  const proto::Node& n = graph.node(i);
  const std::string file = graph.file_label();
  MG_CHECK(!n.name().empty(), "{}: node #{} (op {}) has no name", file, i, n.op());
  const std::string label = graph.node_label(i);
  MG_ASSERT(!OpRegistry::global().empty(),
            "no ops are registered: the program must call register_builtin_ops() "
            "(ops/builtin_ops.h) before it loads or compiles a graph");
  const OpDef* def = OpRegistry::global().find(n.op());
  MG_CHECK(def != nullptr, "{}: unknown op '{}' (known ops: {})", label, n.op(),
           fmt::join(OpRegistry::global().names(), ", "));
  MG_CHECK(n.params_case() == def->params_case(), "{}: expects '{}' parameters, got '{}'", label,
           params_case_name(def->params_case()), params_case_name(n.params_case()));
  const auto specs = def->inputs();
  MG_CHECK(n.inputs_size() <= static_cast<int>(specs.size()),
           "{}: has {} inputs, the op takes at most {}", label, n.inputs_size(), specs.size());
  for (size_t k = 0; k < specs.size(); ++k) {
    const bool present = static_cast<int>(k) < n.inputs_size() && !n.inputs(k).empty();
    MG_CHECK(present || specs[k].optional, "{}: required input {} ({}) is missing", label, k,
             specs[k].name);
  }
  const int num_outputs = def->num_outputs_of(n);
  MG_CHECK(n.outputs_size() == num_outputs, "{}: has {} outputs, the op produces {}", label,
           n.outputs_size(), num_outputs);
  for (const std::string& out : n.outputs()) {
    MG_CHECK(!out.empty(), "{}: an output has no name", label);
    auto it = values.find(out);
    if (it != values.end()) {
      const std::string other =
          it->second.producer >= 0
              ? fmt::format("node '{}'", graph.node(it->second.producer).name())
              : std::string("a graph input or weight");
      MG_FAIL("{}: output '{}' is already produced by {}", label, out, other);
    }
    GraphValue v;
    v.name = out;
    v.source = ValueSource::kNodeOutput;
    v.producer = i;
    values.emplace(out, std::move(v));
  }
}

}  // namespace

void verify_graph(Graph& graph) {
  const std::string file = graph.file_label();
  std::unordered_map<std::string, GraphValue> values;
  add_declared_values(graph, values);

  std::unordered_set<std::string> node_names;
  for (int i = 0; i < graph.num_nodes(); ++i) {
    const std::string& name = graph.node(i).name();
    MG_CHECK(name.empty() || node_names.insert(name).second, "{}: node name '{}' is used twice",
             file, name);
    check_node(graph, i, values);
  }

  // Every input must exist and be of the kind the op expects; build the dependency edges.
  std::vector<std::vector<int>> consumers(graph.num_nodes());
  std::vector<int> pending(graph.num_nodes(), 0);
  for (int i = 0; i < graph.num_nodes(); ++i) {
    const proto::Node& n = graph.node(i);
    const auto specs = OpRegistry::global().find(n.op())->inputs();
    for (int k = 0; k < n.inputs_size(); ++k) {
      const std::string& in = n.inputs(k);
      if (in.empty()) continue;
      auto it = values.find(in);
      MG_CHECK(it != values.end(),
               "{}: input '{}' is neither a graph input, a weight tensor, nor produced by any node",
               graph.node_label(i), in);
      const bool is_weight = it->second.source == ValueSource::kWeight;
      if (specs[k].kind == InputKind::kWeight) {
        MG_CHECK(is_weight, "{}: input {} ({}) must be a weight tensor, but '{}' is an activation",
                 graph.node_label(i), k, specs[k].name, in);
      } else {
        MG_CHECK(!is_weight, "{}: input {} ({}) must be an activation, but '{}' is a weight tensor",
                 graph.node_label(i), k, specs[k].name, in);
      }
      if (it->second.producer >= 0) {
        consumers[it->second.producer].push_back(i);
        ++pending[i];
      }
    }
  }

  // Kahn's algorithm; the lowest-index ready node goes first so the order is stable.
  std::priority_queue<int, std::vector<int>, std::greater<>> ready;
  for (int i = 0; i < graph.num_nodes(); ++i) {
    if (pending[i] == 0) ready.push(i);
  }
  std::vector<int> order;
  while (!ready.empty()) {
    const int i = ready.top();
    ready.pop();
    order.push_back(i);
    for (int c : consumers[i]) {
      if (--pending[c] == 0) ready.push(c);
    }
  }
  if (static_cast<int>(order.size()) != graph.num_nodes()) {
    std::vector<std::string> stuck;
    for (int i = 0; i < graph.num_nodes() && stuck.size() < 8; ++i) {
      if (pending[i] > 0) stuck.push_back(fmt::format("'{}'", graph.node(i).name()));
    }
    MG_FAIL("{}: the graph has a cycle through nodes {}", file, fmt::join(stuck, ", "));
  }

  for (const proto::ValueInfo& out : graph.model().outputs()) {
    check_declared_shape(out, file, "graph output");
    auto it = values.find(out.name());
    MG_CHECK(it != values.end() && it->second.source == ValueSource::kNodeOutput,
             "{}: graph output '{}' is not produced by any node", file, out.name());
  }
  MG_CHECK(graph.model().outputs_size() > 0, "{}: the graph declares no outputs", file);

  graph.values_ = std::move(values);
  graph.order_ = std::move(order);
}

}  // namespace mg
