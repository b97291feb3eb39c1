// Shape and dtype inference: runs every node's OpDef::infer in topological order, checking the
// node's parameters and input types (weights included) and recording its output types; then checks
// the declared graph outputs and that info.vocab_size matches the `logits` output and the
// embedding tables indexed by the graph's token ids.
//
// Ops infer float activations as F32, the dtype of their references; the value table records the
// dtype the activations are stored and computed in, `activation_dtype` (the compiler passes
// activation_dtype_of(options): F32 on the CPU, BF16 by default on CUDA). So every F32 activation
// (graph inputs, node outputs and declared graph outputs alike) is recorded in that dtype, and
// what `moegraph inspect` prints, the kernels receive and the arena stores is what runs.
#pragma once

#include "framework/graph/graph.h"

namespace mg {

// Throws mg::Error prefixed with the node label on the first problem found.
// `activation_dtype` must be F32, F16 or BF16.
void infer_shapes(Graph& graph, DType activation_dtype = DType::kF32);

}  // namespace mg
