#include "framework/import/hf_quantization.h"

#include <algorithm>
#include <cctype>

#include "framework/core/error.h"
#include "framework/io/json.h"

namespace mg {

namespace {

// Compiles an ignore pattern; a bad regex is an error naming the key and the entry.
std::regex compile_pattern(const ConfigReader& q, std::string_view key, const std::string& text) {
  // std::regex compiles and matches recursively: a bound keeps a hostile config.json from
  // exhausting the stack (module names are far shorter).
  constexpr size_t kMaxPattern = 1000;
  if (text.size() > kMaxPattern) {
    q.fail(key, fmt::format("an entry of {} characters is longer than the {} allowed", text.size(),
                            kMaxPattern));
  }
  try {
    return std::regex(text, std::regex::ECMAScript);
  } catch (const std::regex_error& e) {
    q.fail(key, fmt::format("'{}' is not a valid regular expression ({})", text, e.what()));
  }
}

// compressed-tensors' `ignore`: module names, or regexes after "re:" (anchored at the start).
void read_compressed_tensors_ignore(const ConfigReader& q, HfQuantization& h) {
  h.ignore_key = "ignore";
  for (const std::string& text : q.strings_opt("ignore").value_or(std::vector<std::string>{})) {
    HfQuantization::IgnoreRule rule{text, std::nullopt, false};
    if (text.rfind("re:", 0) == 0) rule.regex = compile_pattern(q, "ignore", text.substr(3));
    h.ignore.push_back(std::move(rule));
  }
}

// quant_method "fp8": transformers' FineGrainedFP8Config (DeepSeek-V3, Qwen3 "-FP8").
HfQuantization read_fp8(const ConfigReader& q) {
  HfQuantization h;
  h.method = HfQuantization::Method::kFp8Block;
  h.scale_suffix = "_scale_inv";
  const std::string fmt_name = q.string_or("fmt", "e4m3");
  if (fmt_name != "e4m3") {
    q.fail("fmt", fmt::format("FP8 format '{}' is not supported (only e4m3)", fmt_name));
  }
  if (!q.has("weight_block_size")) {
    q.fail("weight_block_size",
           "missing (per-tensor quant_method fp8 checkpoints are not supported; expected "
           "[rows, cols] block scales such as [128, 128])");
  }
  const std::vector<int64_t> block = q.integers_opt("weight_block_size").value();
  if (block.size() != 2 || block[0] <= 0 || block[1] <= 0 || block[0] > kMaxConfigSize ||
      block[1] > kMaxConfigSize) {
    q.fail("weight_block_size",
           fmt::format("expected two positive integers [rows, cols], found [{}]",
                       fmt::join(block, ", ")));
  }
  h.group = GroupShape::block(block[0], block[1]);
  h.description = fmt::format("fp8 ({}x{} blocks)", block[0], block[1]);
  const std::string scheme = q.string_or("activation_scheme", "dynamic");
  if (scheme != "dynamic") {
    q.fail("activation_scheme",
           fmt::format("'{}' activation scales are not supported (only dynamic)", scheme));
  }
  // DeepSeek's act_quant and transformers' FP8Linear quantize activations per block_size[1]
  // channels; the runtime's dynamic quantization takes 128-channel groups.
  if (block[1] != 128) {
    q.fail("weight_block_size",
           fmt::format("blocks of {} columns: dynamic activation quantization per {} channels is "
                       "not supported (only 128)",
                       block[1], block[1]));
  }
  h.activation = proto::ACT_QUANT_DYNAMIC;
  h.activation_group = block[1];
  h.ignore_key = "modules_to_not_convert";
  for (const std::string& text :
       q.strings_opt("modules_to_not_convert").value_or(std::vector<std::string>{})) {
    h.ignore.push_back({text, compile_pattern(q, "modules_to_not_convert", text), true});
  }
  return h;
}

// The only config group of a compressed-tensors config.
ConfigReader single_group(const ConfigReader& q) {
  const std::optional<ConfigReader> groups = q.object_opt("config_groups");
  if (!groups) q.fail("config_groups", "missing (expected one group of FP8 Linear weights)");
  const nlohmann::json& all = groups->json();
  if (all.size() != 1) {
    q.fail("config_groups",
           fmt::format("{} groups: only one quantization group is supported", all.size()));
  }
  return *groups->object_opt(all.begin().key());
}

HfQuantization read_compressed_tensors_int(const ConfigReader& q, const ConfigReader& group);

// quant_method "compressed-tensors" with FP8 weights (llm-compressor's FP8 / FP8_DYNAMIC /
// FP8_BLOCK schemes).
// compressed-tensors "nvfp4-pack-quantized": llm-compressor's NVFP4 (W4A4, or W4A16 without
// input_activations). Run weight-only: activations stay in the compute dtype.
HfQuantization read_compressed_tensors_nvfp4(const ConfigReader& q, const ConfigReader& group) {
  HfQuantization h;
  h.method = HfQuantization::Method::kCompressedTensorsNvfp4;
  const std::optional<ConfigReader> weights = group.object_opt("weights");
  if (!weights) group.fail("weights", "missing (expected 4-bit float weights)");
  const int64_t bits = weights->integer_or("num_bits", 4);
  const std::string type = weights->string_or("type", "float");
  if (bits != 4 || type != "float") {
    weights->fail("num_bits", fmt::format("{}-bit {} weights are not NVFP4 (expected 4-bit float)",
                                          bits, type));
  }
  const std::string strategy = weights->string_or("strategy", "tensor_group");
  if (strategy != "tensor_group") {
    weights->fail("strategy",
                  fmt::format("NVFP4 weights with strategy '{}' are not supported (expected "
                              "tensor_group)",
                              strategy));
  }
  const int64_t group_size = weights->integer_or("group_size", 16);
  if (group_size != 16) {
    weights->fail("group_size", fmt::format("NVFP4 takes groups of 16 values, not {}", group_size));
  }
  if (!weights->boolean_or("symmetric", true)) {
    weights->fail("symmetric", "asymmetric NVFP4 weights are not supported");
  }
  if (group.has("output_activations")) {
    group.fail("output_activations", "quantized output activations are not supported");
  }
  h.description = fmt::format(
      "compressed-tensors nvfp4-pack-quantized (E2M1, one E4M3 scale per 16 values, F32 global "
      "scale that divides{})",
      group.has("input_activations") ? "; W4A4 activations run weight-only" : "");
  h.group = GroupShape{1, 16};
  h.scale_suffix = "_scale";
  read_compressed_tensors_ignore(q, h);
  return h;
}

HfQuantization read_compressed_tensors(const ConfigReader& q) {
  HfQuantization h;
  h.method = HfQuantization::Method::kCompressedTensorsFp8;
  h.scale_suffix = "_scale";
  const ConfigReader group = single_group(q);
  const std::string format = group.string_or("format", q.string_or("format", "float-quantized"));
  if (format == "pack-quantized") return read_compressed_tensors_int(q, group);
  if (format == "nvfp4-pack-quantized") return read_compressed_tensors_nvfp4(q, group);
  if (format != "float-quantized") {
    q.fail("format", fmt::format("compressed-tensors format '{}' is not supported (only "
                                 "float-quantized FP8, pack-quantized INT4 / INT8 and "
                                 "nvfp4-pack-quantized)",
                                 format));
  }
  const std::optional<ConfigReader> weights = group.object_opt("weights");
  if (!weights) group.fail("weights", "missing (expected 8-bit float weights)");
  const int64_t bits = weights->integer_or("num_bits", 8);
  const std::string type = weights->string_or("type", "float");
  if (bits != 8 || type != "float") {
    weights->fail("num_bits", fmt::format("{}-bit {} weights are not supported (only 8-bit float, "
                                          "FP8 E4M3)",
                                          bits, type));
  }
  if (!weights->boolean_or("symmetric", true)) {
    weights->fail("symmetric", "asymmetric FP8 weights are not supported");
  }
  if (weights->boolean_or("dynamic", false)) {
    weights->fail("dynamic", "dynamically quantized weights are not supported");
  }
  const std::string strategy = weights->string_or("strategy", "tensor");
  if (strategy == "tensor") {
    h.group = GroupShape::per_tensor();
  } else if (strategy == "channel") {
    h.group = GroupShape::per_channel();
  } else if (strategy == "block") {
    const std::vector<int64_t> block =
        weights->integers_opt("block_structure").value_or(std::vector<int64_t>{});
    if (block.size() != 2 || block[0] <= 0 || block[1] <= 0 || block[0] > kMaxConfigSize ||
        block[1] > kMaxConfigSize) {
      weights->fail("block_structure",
                    fmt::format("expected two positive integers [rows, cols], found [{}]",
                                fmt::join(block, ", ")));
    }
    h.group = GroupShape::block(block[0], block[1]);
  } else {
    weights->fail("strategy", fmt::format("weight strategy '{}' is not supported (expected "
                                          "tensor, channel or block)",
                                          strategy));
  }
  h.description = fmt::format("compressed-tensors float-quantized (weights {})", h.group.str());

  if (const std::optional<ConfigReader> input = group.object_opt("input_activations")) {
    const std::string act = input->string_or("strategy", "token");
    if (!input->boolean_or("dynamic", false)) {
      // Static: one calibrated `input_scale` per Linear (stacked and fused weights take the
      // largest of their parts', as vLLM does).
      if (act != "tensor") {
        input->fail("strategy", fmt::format("static activation strategy '{}' is not supported "
                                            "(expected tensor: one input_scale per Linear)",
                                            act));
      }
      h.activation = proto::ACT_QUANT_STATIC;
    } else if (act == "token") {
      h.activation_group = -1;
    } else if (act == "group" && input->integer_or("group_size", 0) == 128) {
      h.activation_group = 128;
    } else {
      input->fail("strategy", fmt::format("dynamic activation strategy '{}' (group_size {}) is not "
                                          "supported (expected token, or group with 128)",
                                          act, input->integer_or("group_size", 0)));
    }
    const int64_t input_bits = input->integer_or("num_bits", 8);
    const std::string input_type = input->string_or("type", "float");
    if (input_bits != 8 || input_type != "float") {
      input->fail("num_bits", fmt::format("{}-bit {} activations are not supported (only FP8)",
                                          input_bits, input_type));
    }
    if (h.activation != proto::ACT_QUANT_STATIC) h.activation = proto::ACT_QUANT_DYNAMIC;
  }
  if (group.has("output_activations")) {
    group.fail("output_activations", "quantized output activations are not supported");
  }
  if (q.has("kv_cache_scheme")) {
    q.fail("kv_cache_scheme", "a quantized KV cache is not supported");
  }
  const std::string status = q.string_or("quantization_status", "compressed");
  if (status != "compressed") {
    q.fail(
        "quantization_status",
        fmt::format("'{}': only compressed checkpoints (FP8 codes on disk) are supported", status));
  }
  read_compressed_tensors_ignore(q, h);
  return h;
}

void read_transformers_ignore(const ConfigReader& q, HfQuantization& h) {
  h.ignore_key = "modules_to_not_convert";
  for (const std::string& text :
       q.strings_opt("modules_to_not_convert").value_or(std::vector<std::string>{})) {
    h.ignore.push_back({text, compile_pattern(q, "modules_to_not_convert", text), true});
  }
}

int64_t read_group_size(const ConfigReader& q, std::string_view key) {
  const int64_t g = q.integer_or(key, 128);
  if (g != -1 && (g < 1 || g > kMaxConfigSize)) {
    q.fail(key, fmt::format("group size {} (expected -1 for channel-wise or a size >= 1)", g));
  }
  return g;
}

std::string group_text(int64_t g) {
  return g < 0 ? std::string("channel-wise") : fmt::format("group {}", g);
}

// quant_method "gptq" (AutoGPTQ / GPTQModel; transformers' GPTQConfig).
HfQuantization read_gptq(const ConfigReader& q) {
  HfQuantization h;
  h.method = HfQuantization::Method::kGptq;
  HfQuantization::Integer& i = h.integer;
  i.bits = static_cast<int>(q.integer_or("bits", 4));
  if (i.bits != 4 && i.bits != 8) {
    q.fail("bits", fmt::format("{}-bit GPTQ weights are not supported (only 4 and 8)", i.bits));
  }
  i.group_cols = read_group_size(q, "group_size");
  i.act_order = q.boolean_or("desc_act", false);
  i.symmetric = q.boolean_or("sym", true);
  const std::string format = q.string_or("checkpoint_format", "gptq");
  if (format == "gptq") {
    i.zero_point_offset = 1;  // v1 stores zero - 1
  } else if (format != "gptq_v2") {
    q.fail("checkpoint_format",
           fmt::format("'{}' is not supported (expected gptq or gptq_v2)", format));
  }
  i.packing = proto::QUANT_PACKING_GPTQ;
  i.codes = "qweight";
  i.scale = "scales";
  i.zero_point = "qzeros";
  i.g_idx = "g_idx";
  i.zero_point_required = true;
  h.description = fmt::format("gptq ({}-bit, {}, {}{})", i.bits, group_text(i.group_cols),
                              i.symmetric ? "sym" : "asym", i.act_order ? ", desc_act" : "");
  read_transformers_ignore(q, h);
  return h;
}

// quant_method "awq" (AutoAWQ GEMM; transformers' AwqConfig).
HfQuantization read_awq(const ConfigReader& q) {
  HfQuantization h;
  h.method = HfQuantization::Method::kAwq;
  HfQuantization::Integer& i = h.integer;
  i.bits = static_cast<int>(q.integer_or("bits", q.integer_or("w_bit", 4)));
  if (i.bits != 4) {
    q.fail("bits", fmt::format("{}-bit AWQ weights are not supported (only 4)", i.bits));
  }
  i.group_cols = read_group_size(q, q.has("group_size") ? "group_size" : "q_group_size");
  std::string version = q.string_or("version", "gemm");
  std::transform(version.begin(), version.end(), version.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (version != "gemm") {
    q.fail("version",
           fmt::format("AWQ version '{}' is not supported (only gemm: GEMV, exllama and ipex "
                       "checkpoints pack differently)",
                       version));
  }
  if (!q.boolean_or("zero_point", true)) {
    q.fail("zero_point", "AWQ without zero points is not supported");
  }
  i.symmetric = false;
  i.packing = proto::QUANT_PACKING_AWQ;
  i.codes = "qweight";
  i.scale = "scales";
  i.zero_point = "qzeros";
  i.zero_point_required = true;
  h.description = fmt::format("awq (4-bit, {}, gemm)", group_text(i.group_cols));
  read_transformers_ignore(q, h);
  return h;
}

// compressed-tensors "pack-quantized": llm-compressor's W4A16 / W8A16 (int weights, no
// activation quantization).
HfQuantization read_compressed_tensors_int(const ConfigReader& q, const ConfigReader& group) {
  HfQuantization h;
  h.method = HfQuantization::Method::kCompressedTensorsInt;
  HfQuantization::Integer& i = h.integer;
  const std::optional<ConfigReader> weights = group.object_opt("weights");
  if (!weights) group.fail("weights", "missing (expected integer weights)");
  i.bits = static_cast<int>(weights->integer_or("num_bits", 4));
  const std::string type = weights->string_or("type", "int");
  if ((i.bits != 4 && i.bits != 8) || type != "int") {
    weights->fail("num_bits", fmt::format("{}-bit {} weights are not supported in pack-quantized "
                                          "checkpoints (only 4- and 8-bit int)",
                                          i.bits, type));
  }
  if (weights->boolean_or("dynamic", false)) {
    weights->fail("dynamic", "dynamically quantized weights are not supported");
  }
  i.symmetric = weights->boolean_or("symmetric", true);
  const std::string strategy = weights->string_or("strategy", "group");
  if (strategy == "group") {
    i.group_cols = weights->integer_or("group_size", 0);
    if (i.group_cols < 1 || i.group_cols > kMaxConfigSize) {
      weights->fail("group_size", fmt::format("{} (expected a group size >= 1)", i.group_cols));
    }
  } else if (strategy == "channel") {
    i.group_cols = -1;
  } else {
    weights->fail("strategy", fmt::format("integer weight strategy '{}' is not supported "
                                          "(expected group or channel)",
                                          strategy));
  }
  if (weights->has("actorder")) {
    const std::string order = weights->string_or("actorder", "");
    if (order == "group") {
      i.act_order = true;  // a weight_g_idx per module
    } else if (order != "weight" && order != "static" && order != "dynamic") {
      weights->fail("actorder",
                    fmt::format("'{}' is not supported (expected group or weight)", order));
    }
  }
  if (group.has("input_activations")) {
    group.fail("input_activations",
               "quantized activations with integer weights are not supported (W4A16 / W8A16 "
               "only)");
  }
  if (group.has("output_activations")) {
    group.fail("output_activations", "quantized output activations are not supported");
  }
  i.packing = proto::QUANT_PACKING_COMPRESSED_TENSORS;
  i.codes = "weight_packed";
  i.scale = "weight_scale";
  i.zero_point = "weight_zero_point";
  i.g_idx = "weight_g_idx";
  i.zero_point_required = !i.symmetric;
  h.description = fmt::format("compressed-tensors pack-quantized ({}-bit, {}, {})", i.bits,
                              group_text(i.group_cols), i.symmetric ? "symmetric" : "asymmetric");
  read_compressed_tensors_ignore(q, h);
  return h;
}

// quant_method "mxfp4": GPT-OSS as OpenAI released it (transformers' Mxfp4Config). Only the
// experts are MXFP4; the family importer reads their blocks and scales.
HfQuantization read_mxfp4(const ConfigReader& q) {
  HfQuantization h;
  h.method = HfQuantization::Method::kMxfp4;
  h.description = "mxfp4 (E2M1, one E8M0 scale per 32 values)";
  h.group = GroupShape{1, 32};
  // No Linear weight has a scale sibling of this name, so every other tensor reads as float.
  h.scale_suffix = "_scales";
  h.ignore_key = "modules_to_not_convert";
  for (const std::string& text :
       q.strings_opt("modules_to_not_convert").value_or(std::vector<std::string>{})) {
    h.ignore.push_back({text, compile_pattern(q, "modules_to_not_convert", text), true});
  }
  return h;
}

// quant_method "modelopt" (quant_algo NVFP4): the quantization_config transformers writes for
// ModelOpt exports, or hf_quant_config.json's "quantization" object (same keys).
HfQuantization read_modelopt(const ConfigReader& q) {
  const std::string algo = q.string("quant_algo");
  if (algo != "NVFP4") {
    q.fail("quant_algo",
           fmt::format("ModelOpt '{}' checkpoints are not supported (only NVFP4)", algo));
  }
  if (q.integer_or("group_size", 16) != 16) {
    q.fail("group_size",
           fmt::format("NVFP4 takes groups of 16 values, not {}", q.integer_or("group_size", 16)));
  }
  HfQuantization h;
  h.method = HfQuantization::Method::kModelOptNvfp4;
  h.description = "modelopt NVFP4 (E2M1, one E4M3 scale per 16 values, F32 global scale)";
  h.group = GroupShape{1, 16};
  h.scale_suffix = "_scale";
  h.ignore_key = "exclude_modules";
  for (const std::string& text :
       q.strings_opt("exclude_modules").value_or(std::vector<std::string>{})) {
    // fnmatch-style wildcards: '*' matches any run; everything else literally; the whole name.
    std::string pattern;
    for (const char c : text) {
      if (c == '*') {
        pattern += ".*";
      } else if (std::string_view(".^$|()[]{}+?\\").find(c) != std::string_view::npos) {
        pattern += '\\';
        pattern += c;
      } else {
        pattern += c;
      }
    }
    h.ignore.push_back({text, compile_pattern(q, "exclude_modules", pattern + "$"), false});
  }
  return h;
}

}  // namespace

HfQuantization read_modelopt_quant_config(const ConfigReader& quantization) {
  return read_modelopt(quantization);
}

const HfQuantization::IgnoreRule* HfQuantization::ignored_by(const std::string& module) const {
  for (const IgnoreRule& rule : ignore) {
    if (rule.regex &&
        std::regex_search(module, *rule.regex, std::regex_constants::match_continuous)) {
      return &rule;
    }
    if (!rule.regex && module == rule.text) return &rule;
    if (rule.suffix_matches && module.size() >= rule.text.size() &&
        module.compare(module.size() - rule.text.size(), rule.text.size(), rule.text) == 0) {
      return &rule;
    }
  }
  return nullptr;
}

HfQuantization read_hf_quantization(const ConfigReader& config) {
  const std::optional<ConfigReader> q = config.object_opt("quantization_config");
  if (!q) return {};
  const std::string method = q->string("quant_method");
  if (method == "fp8") return read_fp8(*q);
  if (method == "compressed-tensors") return read_compressed_tensors(*q);
  if (method == "gptq") return read_gptq(*q);
  if (method == "awq") return read_awq(*q);
  if (method == "mxfp4") return read_mxfp4(*q);
  if (method == "modelopt") return read_modelopt(*q);
  q->fail("quant_method",
          fmt::format("quantized checkpoints of method '{}' are not supported (supported: fp8, "
                      "compressed-tensors float-quantized / pack-quantized / "
                      "nvfp4-pack-quantized, gptq, awq, mxfp4, modelopt NVFP4)",
                      method));
}

}  // namespace mg
