// One import function per Hugging Face model family: reads the family's config.json keys,
// checks and declares its tensors and builds the decoder graph. Each returns the facts shared
// by all families (sizes, eos) for ModelInfo. docs/hf_import.md maps every family to its ops.
#pragma once

#include <functional>
#include <string_view>
#include <vector>

#include "framework/import/config_reader.h"
#include "framework/import/hf_common.h"
#include "framework/import/import_graph.h"

namespace mg {

using LayerProgress = std::function<void(int layer, int layers)>;
using FamilyImport = CommonConfig (*)(ImportGraph& g, const ConfigReader& c,
                                      const LayerProgress& on_layer);

struct HfFamily {
  std::string_view model_type;  // config.json "model_type"
  std::string_view name;        // for docs and messages
  FamilyImport import;
};

// Every supported family, in the order docs and errors list them.
const std::vector<HfFamily>& hf_families();

// hf_families_standard.cc
CommonConfig import_mixtral(ImportGraph& g, const ConfigReader& c, const LayerProgress& on_layer);
CommonConfig import_qwen2_moe(ImportGraph& g, const ConfigReader& c, const LayerProgress& on_layer);
CommonConfig import_qwen3_moe(ImportGraph& g, const ConfigReader& c, const LayerProgress& on_layer);
CommonConfig import_olmoe(ImportGraph& g, const ConfigReader& c, const LayerProgress& on_layer);
CommonConfig import_granitemoe(ImportGraph& g, const ConfigReader& c,
                               const LayerProgress& on_layer);
// hf_families_gpt_oss_llama4.cc
CommonConfig import_gpt_oss(ImportGraph& g, const ConfigReader& c, const LayerProgress& on_layer);
CommonConfig import_llama4(ImportGraph& g, const ConfigReader& c, const LayerProgress& on_layer);
// hf_families_deepseek.cc
CommonConfig import_deepseek_v2(ImportGraph& g, const ConfigReader& c,
                                const LayerProgress& on_layer);
CommonConfig import_deepseek_v3(ImportGraph& g, const ConfigReader& c,
                                const LayerProgress& on_layer);

// Shared by the family files: top_k in [1, experts] ("num_experts_per_tok").
int64_t read_top_k(const ConfigReader& c, int64_t experts,
                   std::string_view key = "num_experts_per_tok");

}  // namespace mg
