// The graph rewrite that writes add_rms_norm (registered with the fuse-ops pass,
// framework/compile/fuse_ops.h, by register_add_rms_norm):
//   add (a, b -> s), without a scale, followed by rms_norm (s -> y) over whole rows
//   (group_size 0)  =>  add_rms_norm (a, b, weight -> s, y) with the rms_norm's params.
// s stays an output (the residual stream reads it again). In a decoder every residual add feeds
// the next norm (the next layer's or the final one), so this removes one launch and one read of
// the residual per add.
#include <string>
#include <unordered_map>
#include <vector>

#include "framework/compile/fuse_ops.h"
#include "ops/nn/add_rms_norm/add_rms_norm.h"

namespace mg {

int fuse_add_rms_norm(proto::Model& model) {
  // value name -> index of the rms_norm reading it as x (the first such node).
  std::unordered_map<std::string, int> norm_of;
  for (int i = 0; i < model.nodes_size(); ++i) {
    const proto::Node& n = model.nodes(i);
    if (n.op() != "rms_norm" || n.inputs_size() < 1 || n.outputs_size() != 1) continue;
    if (n.rms_norm().group_size() != 0) continue;
    norm_of.emplace(n.inputs(0), i);
  }
  std::vector<bool> drop(static_cast<size_t>(model.nodes_size()), false);
  int fused = 0;
  for (int i = 0; i < model.nodes_size(); ++i) {
    proto::Node& add = *model.mutable_nodes(i);
    if (add.op() != "add" || add.inputs_size() != 2 || add.outputs_size() != 1) continue;
    if (add.add().has_scale() && add.add().scale() != 1.0f) continue;
    auto it = norm_of.find(add.outputs(0));
    if (it == norm_of.end() || drop[static_cast<size_t>(it->second)]) continue;
    const proto::Node& norm = model.nodes(it->second);
    add.set_op("add_rms_norm");
    add.set_name(add.name() + "+" + norm.name());
    *add.mutable_rms_norm() = norm.rms_norm();  // replaces the oneof's add params
    add.add_inputs(norm.inputs_size() > 1 ? norm.inputs(1) : std::string());
    add.add_outputs(norm.outputs(0));
    drop[static_cast<size_t>(it->second)] = true;
    ++fused;
  }
  if (fused == 0) return 0;
  replace_graph_nodes(model, drop, {});
  return fused;
}

}  // namespace mg
