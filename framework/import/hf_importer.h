// Imports a Hugging Face MoE checkpoint folder (config.json + safetensors) as a moegraph graph
// whose weight tensors reference the checkpoint's own files: nothing is copied or converted
// here; per-expert tensors are stacked at compile time (TensorInfo.parts).
//
// Supported config.json model_type values: hf_supported_model_types(); FP8 checkpoints
// (quant_method fp8 with block scales, compressed-tensors float-quantized) import with their
// codes and scales as stored (hf_quantization.h). Everything the import rejects (unknown
// model_type, other quantization, missing or ill-typed config key, missing or mis-shaped tensor
// or scale, truncated or invalid shard) is one mg::Error naming the file, key or tensor.
// docs/hf_import.md describes each family's mapping.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "proto/model.pb.h"

namespace mg {

struct HfImportOptions {
  // Directory the graph file will be written to (weight paths are relative to it); empty means
  // the checkpoint folder itself.
  std::filesystem::path graph_dir;
  // KV-cache length recorded in ModelInfo.max_seq_len; 0: min(max_position_embeddings,
  // kDefaultMaxSeqLen).
  int64_t max_seq_len = 0;
  // Called once per layer after its tensors were checked and its nodes built.
  std::function<void(int layer, int layers)> on_layer;
};

inline constexpr int64_t kDefaultImportMaxSeqLen = 4096;

struct HfImportResult {
  proto::Model model;
  std::string model_type;
  int64_t num_layers = 0;
  size_t weight_bytes = 0;                  // of the checkpoint's tensors
  std::vector<std::string> unused_tensors;  // checkpoint tensors the graph does not read
  std::filesystem::path config_path;        // the checkpoint's config.json
  std::filesystem::path graph_dir;          // where weight paths are relative to
};

// Imports and checks the graph as `run` would (verifier, shape inference) before returning it.
HfImportResult import_hf_checkpoint(const std::filesystem::path& hf_dir,
                                    const HfImportOptions& options = {});

// The import without that check: the checkpoint and config are validated, the graph is not run
// through the compiler's passes. For the fuzz target (which links no ops); use the above.
HfImportResult build_hf_graph(const std::filesystem::path& hf_dir,
                              const HfImportOptions& options = {});

// Imports and writes out_dir/model.pbtxt (creating out_dir), with the checkpoint's tokenizer
// and generation files beside it (hf_text_files.h); returns the graph path.
std::filesystem::path import_hf_to_dir(const std::filesystem::path& hf_dir,
                                       const std::filesystem::path& out_dir,
                                       HfImportOptions options = {});

// True when `dir` is a directory holding config.json (a Hugging Face checkpoint folder).
bool is_hf_checkpoint_dir(const std::filesystem::path& dir);

// "mixtral, qwen2_moe, ...", for help texts and errors.
std::vector<std::string> hf_supported_model_types();

}  // namespace mg
