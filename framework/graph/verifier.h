// Structural checks of a loaded graph, run once after load (like ONNX Runtime's Graph::Resolve):
// unique names, known ops with the right parameter message and arity, every input produced or
// declared, outputs produced, no cycle. Builds Graph::values() and Graph::order().
// Per-op semantic checks (parameter values, shapes, dtypes) happen in infer_shapes().
#pragma once

#include "framework/graph/graph.h"

namespace mg {

// Throws mg::Error naming the file and node on the first problem found.
void verify_graph(Graph& graph);

}  // namespace mg
