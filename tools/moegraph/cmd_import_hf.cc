// `moegraph import-hf HF_DIR -o OUT_DIR`: import a Hugging Face MoE checkpoint folder as
// OUT_DIR/model.pbtxt whose weights reference the checkpoint's safetensors files (no copy); the
// checkpoint's tokenizer.json, tokenizer_config.json and generation_config.json are copied beside
// it.
#include <unistd.h>

#include <cstdio>
#include <iostream>

#include "framework/core/checked_math.h"
#include "framework/core/error.h"
#include "framework/import/hf_importer.h"
#include "framework/import/hf_text_files.h"
#include "framework/io/graph_loader.h"
#include "framework/io/regular_file.h"
#include "framework/text/tokenizer.h"
#include "tools/moegraph/commands.h"
#include "tools/moegraph/flag_checks.h"

namespace mg::cli {

namespace {

struct ImportArgs {
  std::string hf_dir;
  std::string out_dir;
  int64_t max_seq_len = 0;
  bool quiet = false;
};

// Large checkpoints (many layers) or an interactive terminal get one progress line per layer.
constexpr int kProgressMinLayers = 16;

int import_hf(const ImportArgs& a) {
  HfImportOptions options;
  options.max_seq_len = a.max_seq_len;
  const bool tty = isatty(fileno(stderr)) != 0;
  if (!a.quiet) {
    options.on_layer = [tty](int layer, int layers) {
      if (!tty && layers < kProgressMinLayers) return;
      std::cerr << fmt::format("import-hf: layer {}/{} checked\n", layer + 1, layers);
    };
  }
  const std::filesystem::path out(a.out_dir);
  check_output_dir(out, "-o");
  std::error_code ec;
  std::filesystem::create_directories(out, ec);
  MG_CHECK(!ec, "-o: cannot create output directory '{}': {}", a.out_dir, ec.message());
  options.graph_dir = out;
  HfImportResult r = import_hf_checkpoint(a.hf_dir, options);
  const std::filesystem::path graph = out / "model.pbtxt";
  save_graph(graph, r.model);
  const std::vector<std::string> text_files = copy_hf_text_files(a.hf_dir, out);

  int assembled = 0;
  for (const proto::TensorInfo& t : r.model.tensors()) assembled += t.parts_size() > 0 ? 1 : 0;
  std::cout << fmt::format(
      "imported {} ({} layers, {} nodes, {} weight tensors of which {} are assembled from "
      "parts, {:.1f} MiB in the checkpoint) to {}\n",
      r.model_type, r.num_layers, r.model.nodes_size(), r.model.tensors_size(), assembled,
      r.weight_bytes / 1048576.0, graph.string());
  std::cout << "weights are read from the checkpoint's files in " << a.hf_dir
            << " (keep them in place)\n";
  if (!text_files.empty()) {
    std::cout << fmt::format("copied {} to {}\n", fmt::join(text_files, ", "), a.out_dir);
  }
  if (std::filesystem::exists(out / "tokenizer.json")) {
    // A tokenizer moegraph cannot run does not stop the import: --prompt-ids still works.
    try {
      text::Tokenizer::load(out / "tokenizer.json");
    } catch (const Error& e) {
      std::cout << "note: --prompt and tokenize will refuse this tokenizer: " << e.what() << "\n";
    }
  } else {
    std::cout << "note: the checkpoint has no tokenizer.json; run takes --prompt-ids, or "
                 "--prompt with --tokenizer PATH\n";
  }
  if (!r.unused_tensors.empty()) {
    std::cout << fmt::format("{} checkpoint tensors are not used by the graph, e.g. '{}'\n",
                             r.unused_tensors.size(), r.unused_tensors.front());
  }
  return 0;
}

}  // namespace

Command add_import_hf_command(CLI::App& app) {
  auto args = std::make_shared<ImportArgs>();
  CLI::App* cmd = app.add_subcommand(
      "import-hf",
      "Import a Hugging Face MoE checkpoint folder (config.json + safetensors) as a graph that "
      "reads the checkpoint's weights in place");
  cmd->add_option("HF_DIR", args->hf_dir, "Checkpoint folder")->required();
  cmd->add_option("-o,--out", args->out_dir, "Output folder for model.pbtxt")->required();
  cmd->add_option("--max-seq-len", args->max_seq_len,
                  fmt::format("KV-cache length recorded in the graph (default: "
                              "min(max_position_embeddings, {}))",
                              kDefaultImportMaxSeqLen))
      ->check(int_range(0, kMaxSeqLen));
  cmd->add_flag("--quiet", args->quiet, "No per-layer progress on stderr");
  cmd->footer(
      fmt::format("Supported model_type values: {}", fmt::join(hf_supported_model_types(), ", ")));
  return [args] { return import_hf(*args); };
}

}  // namespace mg::cli
