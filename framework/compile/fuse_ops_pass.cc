// Pass 2 (when CompileOptions::fuse_ops, framework/compile/fuse_ops.h): rewrites op sequences into
// fused ops, in the graph itself, so every later pass (shapes, weights, kernels, memory) sees an
// ordinary graph.
//
// Why a graph rewrite and not a fused kernel chosen inside select-kernels: the fused op has its
// own CPU kernel, CUDA kernel, shape checks and tests like any op; the plan, `inspect --plan`
// and the profiler name it; and turning the pass off (--no-fuse) runs the graph exactly as
// written, which is how the tests show the rewrite changes no output.
//
// The framework knows no op by name: the rewrites are registered by the ops that own the fused
// op (register_graph_rewrite), e.g. ops/nn/linear/linear_fusion.cc (q/k/v as one linear),
// ops/nn/add_rms_norm/add_rms_norm_fusion.cc and ops/nn/qk_norm_rope/qk_norm_rope_fusion.cc.
#include <mutex>
#include <string>
#include <vector>

#include "framework/compile/fuse_ops.h"
#include "framework/compile/pass.h"
#include "framework/core/logging.h"
#include "framework/graph/verifier.h"

namespace mg {

namespace {

struct NamedRewrite {
  std::string name;
  GraphRewrite rewrite;
};

std::mutex& rewrites_mutex() {
  static std::mutex mutex;
  return mutex;
}

std::vector<NamedRewrite>& rewrites() {
  static std::vector<NamedRewrite> list;
  return list;
}

class FuseOpsPass final : public Pass {
 public:
  std::string_view name() const override { return "fuse-ops"; }
  void run(CompileState& state) const override {
    std::vector<NamedRewrite> list;
    {
      std::lock_guard<std::mutex> lock(rewrites_mutex());
      list = rewrites();
    }
    proto::Model model = state.graph.model();  // nodes and tensor infos only: cheap to copy
    int total = 0;
    for (const NamedRewrite& r : list) {
      const int n = r.rewrite(model);
      if (n > 0) {
        MG_LOG_INFO("compile", "{}: {}: {} rewrites", state.graph.file_label(), r.name, n);
      }
      total += n;
    }
    if (total == 0) return;
    state.graph = Graph(std::move(model), state.graph.source_file());
    verify_graph(state.graph);  // new node indices, values and order
  }
};

}  // namespace

void register_graph_rewrite(const std::string& name, GraphRewrite rewrite) {
  std::lock_guard<std::mutex> lock(rewrites_mutex());
  for (const NamedRewrite& r : rewrites()) {
    if (r.name == name) return;
  }
  rewrites().push_back({name, std::move(rewrite)});
}

void replace_graph_nodes(proto::Model& model, const std::vector<bool>& drop,
                         std::vector<proto::Node> fused) {
  google::protobuf::RepeatedPtrField<proto::Node> kept;
  for (int i = 0; i < model.nodes_size(); ++i) {
    if (!drop[static_cast<size_t>(i)]) *kept.Add() = std::move(*model.mutable_nodes(i));
  }
  for (proto::Node& n : fused) *kept.Add() = std::move(n);
  model.mutable_nodes()->Swap(&kept);
}

std::unique_ptr<Pass> make_fuse_ops_pass() {
  return std::make_unique<FuseOpsPass>();
}

}  // namespace mg
