// Subcommands of the `moegraph` command. Each adds its options to the app and returns the
// function that runs it; the function returns the process exit code.
#pragma once

#include <filesystem>
#include <functional>

#include <CLI/CLI.hpp>

#include "framework/core/dtype.h"

namespace mg::cli {

using Command = std::function<int()>;

Command add_run_command(CLI::App& app);
Command add_inspect_command(CLI::App& app);
Command add_make_model_command(CLI::App& app);
Command add_bench_command(CLI::App& app);
Command add_tokenize_command(CLI::App& app);
Command add_serve_command(CLI::App& app);

// Resolves a MODEL argument: a graph file, or a directory holding model.pbtxt or model.pb.
// Empty means the bundled default model. Throws mg::Error naming what was looked for.
std::filesystem::path resolve_model(const std::string& model);

// The tokenizer.json of a graph: `flag_path` (--tokenizer) when not empty, else tokenizer.json
// beside the graph file (import-hf copies the checkpoint's there; make-model writes a byte-level
// one). Throws mg::Error saying where it looked and what to pass instead.
std::filesystem::path resolve_tokenizer(const std::filesystem::path& graph,
                                        const std::string& flag_path);

// The eos ids of generation_config.json beside the graph; empty when there is none.
std::vector<int32_t> generation_eos_ids(const std::filesystem::path& graph);

// Parses "1,2,3" (spaces allowed). Throws mg::Error naming the bad element.
std::vector<int32_t> parse_id_list(const std::string& text, const std::string& flag);

// --dtype of run and inspect: "bf16", "f16" or "f32" (the names make-model takes too). Throws
// mg::Error for another name.
DType parse_activation_dtype(const std::string& text);

}  // namespace mg::cli
