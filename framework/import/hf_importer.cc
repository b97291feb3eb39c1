#include "framework/import/hf_importer.h"

#include <algorithm>
#include <system_error>

#include "framework/core/error.h"
#include "framework/import/config_reader.h"
#include "framework/import/hf_checkpoint.h"
#include "framework/import/hf_families.h"
#include "framework/import/hf_quantization.h"
#include "framework/import/import_graph.h"
#include "framework/io/graph_loader.h"
#include "framework/io/json.h"

namespace mg {

const std::vector<HfFamily>& hf_families() {
  static const std::vector<HfFamily> families = {
      {"mixtral", "Mixtral", import_mixtral},
      {"qwen2_moe", "Qwen2-MoE", import_qwen2_moe},
      {"qwen3_moe", "Qwen3-MoE", import_qwen3_moe},
      {"olmoe", "OLMoE", import_olmoe},
      {"deepseek_v2", "DeepSeek-V2", import_deepseek_v2},
      {"deepseek_v3", "DeepSeek-V3", import_deepseek_v3},
      {"gpt_oss", "GPT-OSS", import_gpt_oss},
      {"llama4_text", "Llama-4 (text)", import_llama4},
      {"llama4", "Llama-4 (text part of the multimodal checkpoint)", import_llama4},
      {"granitemoe", "Granite-MoE", import_granitemoe},
      {"granitemoeshared", "GraniteMoeShared", import_granitemoe},
  };
  return families;
}

std::vector<std::string> hf_supported_model_types() {
  std::vector<std::string> out;
  for (const HfFamily& f : hf_families()) out.emplace_back(f.model_type);
  return out;
}

bool is_hf_checkpoint_dir(const std::filesystem::path& dir) {
  std::error_code ec;
  return std::filesystem::is_directory(dir, ec) && std::filesystem::exists(dir / "config.json", ec);
}

HfImportResult build_hf_graph(const std::filesystem::path& hf_dir, const HfImportOptions& options) {
  const HfCheckpoint checkpoint(hf_dir);
  const ConfigReader config(checkpoint.config(), checkpoint.config_path());
  const std::string model_type = config.string("model_type");
  const auto& families = hf_families();
  const auto family = std::find_if(families.begin(), families.end(),
                                   [&](const HfFamily& f) { return f.model_type == model_type; });
  MG_CHECK(family != families.end(), "{}: model_type '{}' is not supported (supported: {})",
           checkpoint.config_path().string(), model_type,
           fmt::join(hf_supported_model_types(), ", "));
  // Checked before the family reads its keys: an unsupported quantization is the first error.
  HfQuantization quantization = read_hf_quantization(config);
  // (fp4) ModelOpt exports may declare their quantization only in hf_quant_config.json.
  const std::filesystem::path modelopt = checkpoint.dir() / "hf_quant_config.json";
  if (!quantization.quantized() && std::filesystem::is_regular_file(modelopt)) {
    const nlohmann::json j = load_json_file(modelopt);
    const ConfigReader root(j, modelopt);
    const std::optional<ConfigReader> q = root.object_opt("quantization");
    MG_CHECK(q.has_value(), "{}: missing key 'quantization' (ModelOpt's settings)",
             modelopt.string());
    quantization = read_modelopt_quant_config(*q);
  }
  // (fp4) MXFP4 checkpoints exist for GPT-OSS only: its importer reads the *_blocks / *_scales.
  MG_CHECK(quantization.method != HfQuantization::Method::kMxfp4 || model_type == "gpt_oss",
           "{}: quantization_config.quant_method 'mxfp4' is supported for model_type gpt_oss only "
           "(GPT-OSS's released experts), not '{}'",
           checkpoint.config_path().string(), model_type);

  std::filesystem::path graph_dir = options.graph_dir.empty() ? hf_dir : options.graph_dir;
  ImportGraph g(checkpoint, graph_dir, std::move(quantization));
  // The multimodal Llama-4 config keeps the text model's keys under text_config.
  std::optional<ConfigReader> text;
  if (model_type == "llama4") {
    text = config.object_opt("text_config");
    MG_CHECK(text.has_value(),
             "{}: missing key 'text_config' (a llama4 config keeps the text "
             "model's settings there)",
             checkpoint.config_path().string());
  }
  const CommonConfig cc = family->import(g, text ? *text : config, options.on_layer);

  proto::Model& m = g.model();
  m.set_name(fmt::format("hf-{}", model_type));
  m.set_format_version(kGraphFormatVersion);
  proto::ModelInfo* info = m.mutable_info();
  info->set_family(model_type);
  info->set_vocab_size(cc.vocab);
  MG_CHECK(options.max_seq_len >= 0, "max_seq_len must be >= 0, got {}", options.max_seq_len);
  info->set_max_seq_len(options.max_seq_len > 0
                            ? options.max_seq_len
                            : std::min(cc.max_position_embeddings, kDefaultImportMaxSeqLen));
  info->set_eos_token_id(cc.eos_token_id);

  HfImportResult result;
  result.model = std::move(m);
  result.model_type = model_type;
  result.num_layers = cc.layers;
  result.weight_bytes = checkpoint.total_bytes();
  result.unused_tensors = g.unused_keys();
  result.config_path = checkpoint.config_path();
  result.graph_dir = graph_dir;
  return result;
}

}  // namespace mg
