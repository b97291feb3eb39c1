// The checks `run` starts with (verifier, shape inference: every op's params against its
// inputs), for tools that write graphs: make-model and import-hf call this before writing, so
// they never write a graph that run refuses.
#pragma once

#include <filesystem>
#include <string_view>

#include "proto/model.pb.h"

namespace mg {

// Throws mg::Error "<cause> make a graph that run would refuse: <the verifier's message>".
// `cause` names what the user controls, e.g. "these flags" or "config.json: these config values".
void check_graph_runs(const proto::Model& model, const std::filesystem::path& graph_file,
                      std::string_view cause);

}  // namespace mg
