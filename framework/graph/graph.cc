#include "framework/graph/graph.h"

namespace mg {

Graph::Graph(proto::Model model, std::filesystem::path source_file)
    : model_(std::move(model)), source_file_(std::move(source_file)) {}

std::string Graph::node_label(int i) const {
  const proto::Node& n = node(i);
  return fmt::format("{}: node '{}' (op {})", file_label(), n.name(), n.op());
}

const GraphValue& Graph::value(const std::string& name) const {
  auto it = values_.find(name);
  MG_ASSERT(it != values_.end(), "value '{}' not in the graph", name);
  return it->second;
}

GraphValue& Graph::mutable_value(const std::string& name) {
  auto it = values_.find(name);
  MG_ASSERT(it != values_.end(), "value '{}' not in the graph", name);
  return it->second;
}

}  // namespace mg

namespace mg {

ValueType input_view(const ValueType& type, const InputSpec& spec) {
  ValueType t = type;
  if (t.quant_group && !spec.takes_quantized) {
    t.dtype = DType::kF32;
    t.quant_group.reset();
    t.quant_element = QuantElement::kFromDtype;
  }
  return t;
}

}  // namespace mg
