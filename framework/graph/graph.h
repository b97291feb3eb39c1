// The in-memory graph: the loaded Model plus the value table and node order the verifier builds.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "framework/op/op_registry.h"
#include "proto/model.pb.h"

namespace mg {

// Where a value comes from.
enum class ValueSource {
  kGraphInput,  // declared in Model.inputs
  kWeight,      // declared in Model.tensors
  kNodeOutput,  // produced by a node
};

struct GraphValue {
  std::string name;
  ValueSource source = ValueSource::kNodeOutput;
  // Producing node (index into Graph::nodes()), or -1.
  int producer = -1;
  // Known after shape inference for node outputs; from the declaration otherwise.
  std::optional<ValueType> type;
  // Index into Model.tensors for weights, -1 otherwise.
  int tensor_index = -1;
};

// The type op input `spec` sees for a value of `type`: a quantized weight (quant_group set) is
// seen as stored by an input that takes quantized weights and as its dequantized F32 values by
// every other input (the place-weights pass dequantizes it for them).
ValueType input_view(const ValueType& type, const InputSpec& spec);

class Graph {
 public:
  // Takes the parsed model; `source_file` names the graph file in errors and is the base for
  // relative weight paths. Call verify_graph() before using values() or order().
  Graph(proto::Model model, std::filesystem::path source_file);

  const proto::Model& model() const { return model_; }
  const std::filesystem::path& source_file() const { return source_file_; }
  // The graph file's name for messages ("model.pbtxt").
  std::string file_label() const { return source_file_.filename().string(); }

  int num_nodes() const { return model_.nodes_size(); }
  const proto::Node& node(int i) const { return model_.nodes(i); }
  // "model.pbtxt: node 'layers.0.attn' (op attention)"
  std::string node_label(int i) const;

  // Filled by verify_graph(): nodes in a topological order, and every named value.
  const std::vector<int>& order() const { return order_; }
  const std::unordered_map<std::string, GraphValue>& values() const { return values_; }
  const GraphValue& value(const std::string& name) const;
  GraphValue& mutable_value(const std::string& name);

 private:
  friend void verify_graph(Graph& graph);
  proto::Model model_;
  std::filesystem::path source_file_;
  std::vector<int> order_;
  std::unordered_map<std::string, GraphValue> values_;
};

}  // namespace mg
