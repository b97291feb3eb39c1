// import_hf_checkpoint and import_hf_to_dir: build_hf_graph, then the checks run starts with.
// Kept apart from hf_importer.cc so the checkpoint parser links without the compiler's passes
// (and the op registry they need): the fuzz target drives build_hf_graph alone.
#include <system_error>

#include "framework/core/error.h"
#include "framework/graph/graph_check.h"
#include "framework/import/hf_importer.h"
#include "framework/import/hf_text_files.h"
#include "framework/io/graph_loader.h"

namespace mg {

HfImportResult import_hf_checkpoint(const std::filesystem::path& hf_dir,
                                    const HfImportOptions& options) {
  HfImportResult result = build_hf_graph(hf_dir, options);
  // The families' readers check each config value that becomes a param and name its key; this
  // catches the combinations they miss, naming config.json and the node.
  check_graph_runs(result.model, result.graph_dir / "model.pbtxt",
                   fmt::format("{}: these config values", result.config_path.string()));
  return result;
}

std::filesystem::path import_hf_to_dir(const std::filesystem::path& hf_dir,
                                       const std::filesystem::path& out_dir,
                                       HfImportOptions options) {
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  MG_CHECK(!ec, "cannot create output directory '{}': {}", out_dir.string(), ec.message());
  options.graph_dir = out_dir;
  const HfImportResult result = import_hf_checkpoint(hf_dir, options);
  const std::filesystem::path graph = out_dir / "model.pbtxt";
  save_graph(graph, result.model);
  copy_hf_text_files(hf_dir, out_dir);
  return graph;
}

}  // namespace mg
