// The fuse-ops compile pass (framework/compile/fuse_ops_pass.cc): graph rewrites that replace op
// sequences with fused ops (sibling linears -> one linear with output_features, add + rms_norm
// -> add_rms_norm, q/k rms_norm + rope, or the q and k ropes alone, -> qk_norm_rope), run right
// after verify. The ops that own a fused op register its rewrite (the framework knows no op by
// name). On by default; CompileOptions::fuse_ops = false (moegraph --no-fuse) runs graphs as
// written, which is how tests show a rewrite changes no output.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "proto/model.pb.h"

namespace mg {

class Pass;

// The pass itself; compile_model runs it right after verify when enabled.
std::unique_ptr<Pass> make_fuse_ops_pass();

// Rewrites `model` in place (its nodes, and weight tensor infos a fusion concatenates) and
// returns how many rewrites it made; the pass verifies the graph again afterwards. A rewrite must
// keep every value the rest of the graph reads.
using GraphRewrite = std::function<int(proto::Model& model)>;

// Adds a rewrite to the pass (once per name; later calls with the same name are ignored).
// Rewrites run in registration order.
void register_graph_rewrite(const std::string& name, GraphRewrite rewrite);

// For rewrites: removes the nodes of `model` whose `drop` entry is set (drop has one per node) and
// appends `fused` after the rest (the verifier sorts nodes topologically, so fused nodes can go
// at the end). Keeps the order of the others.
void replace_graph_nodes(proto::Model& model, const std::vector<bool>& drop,
                         std::vector<proto::Node> fused);

}  // namespace mg
