// The fuse-ops compile pass (framework/compile/fuse_ops_pass.cc): graph rewrites that replace op
// sequences with fused ops (add + rms_norm -> add_rms_norm), run right after verify. The ops that
// own a fused op register its rewrite (the framework knows no op by name). On by default; off
// (moegraph --no-fuse) runs graphs as written, which is how tests show a rewrite changes no output.
//
// A process-wide switch rather than a CompileOptions field for now: compile_options.h is included
// by ~90 translation units, and the field can move there with the next change that rebuilds them.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "proto/model.pb.h"

namespace mg {

class Pass;

// The pass itself; compile_model runs it right after verify when enabled.
std::unique_ptr<Pass> make_fuse_ops_pass();

// Rewrites `model` in place (nodes only) and returns how many rewrites it made; the pass verifies
// the graph again afterwards. A rewrite must keep every value the rest of the graph reads.
using GraphRewrite = std::function<int(proto::Model& model)>;

// Adds a rewrite to the pass (once per name; later calls with the same name are ignored).
// Rewrites run in registration order.
void register_graph_rewrite(const std::string& name, GraphRewrite rewrite);

void set_fuse_ops_enabled(bool enabled);
bool fuse_ops_enabled();

// Sets the switch for a scope and restores the previous value (tests).
class FuseOpsScope {
 public:
  explicit FuseOpsScope(bool enabled) : previous_(fuse_ops_enabled()) {
    set_fuse_ops_enabled(enabled);
  }
  ~FuseOpsScope() { set_fuse_ops_enabled(previous_); }
  FuseOpsScope(const FuseOpsScope&) = delete;
  FuseOpsScope& operator=(const FuseOpsScope&) = delete;

 private:
  bool previous_;
};

}  // namespace mg
