// Entry points: graph file or Graph → ExecutionPlan.
#pragma once

#include <filesystem>
#include <memory>

#include "framework/compile/compile_options.h"
#include "framework/compile/execution_plan.h"

namespace mg {

// Loads the graph file (.pbtxt or .pb) and compiles it. Throws mg::Error naming the file, node or
// tensor on bad input.
std::unique_ptr<ExecutionPlan> compile_graph_file(const std::filesystem::path& graph_file,
                                                  const CompileOptions& options);

// Compiles an already parsed model; `source_file` locates its weight files.
std::unique_ptr<ExecutionPlan> compile_model(proto::Model model,
                                             const std::filesystem::path& source_file,
                                             const CompileOptions& options);

}  // namespace mg
