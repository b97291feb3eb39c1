// Shape and dtype inference: runs every node's OpDef::infer in topological order, checking the
// node's parameters and input types (weights included) and recording its output types; then checks
// the declared graph outputs and that info.vocab_size matches the `logits` output and the
// embedding tables indexed by the graph's token ids.
#pragma once

#include "framework/graph/graph.h"

namespace mg {

// Throws mg::Error prefixed with the node label on the first problem found.
void infer_shapes(Graph& graph);

}  // namespace mg
