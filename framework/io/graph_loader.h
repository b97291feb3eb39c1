// Graph files: proto::Model as protobuf text (.pbtxt) or binary (.pb).
//
// Loading checks syntax and the format version only; names, arity and params are the graph
// verifier's job (framework/graph).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string_view>

#include "proto/model.pb.h"

namespace mg {

// The format_version this build reads and writes.
inline constexpr uint32_t kGraphFormatVersion = 3;
// Files of every version from 1 up to kGraphFormatVersion load (proto/model.proto lists them).
inline constexpr uint32_t kOldestGraphFormatVersion = 1;

// Loads `path` by its extension: ".pbtxt" text, ".pb" binary. Throws mg::Error naming the file:
// "model.pbtxt:12:5: <message>" for text syntax errors, "model.pb: not a valid binary moegraph
// graph (...)" for binary ones, and errors for a missing, empty or unknown-extension file and for a
// format_version this build does not read (0, or newer than kGraphFormatVersion).
proto::Model load_graph(const std::filesystem::path& path);

// Parse `data` as text or binary; `name` stands for the file in error messages. The same checks as
// load_graph, format_version included.
proto::Model parse_graph_text(std::string_view data, std::string_view name);
proto::Model parse_graph_binary(std::string_view data, std::string_view name);

// Writes `model` as text (".pbtxt") or binary (".pb"), by extension, through a temporary file
// renamed into place. Throws mg::Error naming the path on an unknown extension or I/O errors.
void save_graph(const std::filesystem::path& path, const proto::Model& model);

}  // namespace mg
