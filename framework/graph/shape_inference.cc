#include "framework/graph/shape_inference.h"

#include "framework/io/proto_dtype.h"

namespace mg {

void infer_shapes(Graph& graph) {
  for (int i : graph.order()) {
    const proto::Node& n = graph.node(i);
    const OpDef* def = OpRegistry::global().find(n.op());
    std::vector<std::optional<ValueType>> inputs(def->inputs().size());
    for (int k = 0; k < n.inputs_size(); ++k) {
      if (!n.inputs(k).empty()) inputs[k] = graph.value(n.inputs(k)).type;
    }
    std::vector<ValueType> outputs;
    try {
      outputs = def->infer(n, inputs);
    } catch (const Error& e) {
      throw Error(fmt::format("{}: {}", graph.node_label(i), e.what()));
    }
    MG_ASSERT(static_cast<int>(outputs.size()) == n.outputs_size(), "op {} inferred {} outputs",
              n.op(), outputs.size());
    for (int k = 0; k < n.outputs_size(); ++k) graph.mutable_value(n.outputs(k)).type = outputs[k];
  }
  for (const proto::ValueInfo& out : graph.model().outputs()) {
    const ValueType& inferred = *graph.value(out.name()).type;
    Shape declared;
    for (int64_t d : out.shape()) declared.push_back(d < 0 ? kTokens : d);
    const ValueType want{from_proto(out.dtype(), fmt::format("{}: graph output '{}'",
                                                             graph.file_label(), out.name())),
                         declared};
    MG_CHECK(inferred == want, "{}: graph output '{}' is declared as {} but computes {}",
             graph.file_label(), out.name(), value_type_str(want), value_type_str(inferred));
  }
}

}  // namespace mg
