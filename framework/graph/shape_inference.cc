#include "framework/graph/shape_inference.h"

#include "framework/io/proto_dtype.h"

namespace mg {

namespace {

// info.vocab_size bounds the token ids the runtime accepts (and, on GPUs, the only bound the
// embedding gather has), and says how wide the logits are: a decoder's `logits` output and every
// embedding table indexed by the graph's token ids must have exactly that many rows/columns.
void check_vocab_size(const Graph& graph) {
  const proto::Model& m = graph.model();
  const int64_t vocab = m.info().vocab_size();
  const std::string file = graph.file_label();
  for (const proto::ValueInfo& out : m.outputs()) {
    if (out.name() != "logits") continue;
    const Shape& shape = graph.value(out.name()).type->shape;
    MG_CHECK(!shape.empty() && shape.back() == vocab,
             "{}: info.vocab_size is {} but graph output 'logits' has {} columns", file, vocab,
             shape.empty() ? 0 : shape.back());
  }
  for (int i : graph.order()) {
    const proto::Node& n = graph.node(i);
    if (n.op() != "embedding" || n.inputs_size() < 2) continue;
    const GraphValue& ids = graph.value(n.inputs(0));
    const GraphValue& table = graph.value(n.inputs(1));
    if (ids.source != ValueSource::kGraphInput || table.source != ValueSource::kWeight) continue;
    const Shape& shape = table.type->shape;
    MG_CHECK(!shape.empty() && shape[0] == vocab,
             "{}: info.vocab_size is {} but embedding table '{}' (node '{}') has {} rows", file,
             vocab, table.name, n.name(), shape.empty() ? 0 : shape[0]);
  }
}

// The dtype a value the ops type as `inferred` is stored in.
DType stored_dtype(DType inferred, DType activation_dtype) {
  return inferred == DType::kF32 ? activation_dtype : inferred;
}

}  // namespace

void infer_shapes(Graph& graph, DType activation_dtype) {
  MG_ASSERT(activation_dtype == DType::kF32 || activation_dtype == DType::kF16 ||
                activation_dtype == DType::kBF16,
            "activation dtype {} is not F32, F16 or BF16", dtype_name(activation_dtype));
  for (const proto::ValueInfo& in : graph.model().inputs()) {
    std::optional<ValueType>& type = graph.mutable_value(in.name()).type;
    type->dtype = stored_dtype(type->dtype, activation_dtype);
  }
  for (int i : graph.order()) {
    const proto::Node& n = graph.node(i);
    const OpDef* def = OpRegistry::global().find(n.op());
    std::vector<std::optional<ValueType>> inputs(def->inputs().size());
    for (int k = 0; k < n.inputs_size(); ++k) {
      if (!n.inputs(k).empty())
        inputs[k] = input_view(*graph.value(n.inputs(k)).type, def->inputs()[k]);
    }
    std::vector<ValueType> outputs;
    try {
      outputs = def->infer(n, inputs);
    } catch (const Error& e) {
      throw Error(fmt::format("{}: {}", graph.node_label(i), e.what()));
    }
    MG_ASSERT(static_cast<int>(outputs.size()) == n.outputs_size(), "op {} inferred {} outputs",
              n.op(), outputs.size());
    for (int k = 0; k < n.outputs_size(); ++k) {
      outputs[k].dtype = stored_dtype(outputs[k].dtype, activation_dtype);
      graph.mutable_value(n.outputs(k)).type = outputs[k];
    }
  }
  for (const proto::ValueInfo& out : graph.model().outputs()) {
    const ValueType& inferred = *graph.value(out.name()).type;
    Shape declared;
    for (int64_t d : out.shape()) declared.push_back(d < 0 ? kTokens : d);
    const ValueType want{from_proto(out.dtype(), fmt::format("{}: graph output '{}'",
                                                             graph.file_label(), out.name())),
                         declared};
    // A declared F32 output is stored in the activation dtype like every F32 activation (the
    // session converts the logits back to F32 when it copies them out).
    const ValueType stored{stored_dtype(want.dtype, activation_dtype), want.shape};
    MG_CHECK(inferred == stored, "{}: graph output '{}' is declared as {} but computes {}",
             graph.file_label(), out.name(), value_type_str(want), value_type_str(inferred));
  }
  check_vocab_size(graph);
}

}  // namespace mg
