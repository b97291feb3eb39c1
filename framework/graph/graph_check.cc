#include "framework/graph/graph_check.h"

#include "framework/core/error.h"
#include "framework/graph/graph.h"
#include "framework/graph/shape_inference.h"
#include "framework/graph/verifier.h"

namespace mg {

void check_graph_runs(const proto::Model& model, const std::filesystem::path& graph_file,
                      std::string_view cause) {
  Graph graph(model, graph_file);
  try {
    verify_graph(graph);
    infer_shapes(graph);
  } catch (const Error& e) {
    MG_FAIL("{} make a graph that run would refuse: {}", cause, e.what());
  }
}

}  // namespace mg
