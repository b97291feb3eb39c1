// The quantization a Hugging Face checkpoint declares in config.json's `quantization_config`, and
// which of its modules it covers. Supported (docs/hf_import.md, "Quantized checkpoints"):
//   - quant_method "fp8" (DeepSeek-V3, Qwen3 "-FP8"): fmt e4m3, weight_block_size [rows, cols],
//     activation_scheme dynamic (per token per `cols` channels) ; per Linear `weight` F8_E4M3
//     [out, in] and `weight_scale_inv` [ceil(out/rows), ceil(in/cols)] that multiplies;
//     modules_to_not_convert lists modules that stay unquantized (transformers' matching: a regex
//     anchored at the start of the module name, or a suffix of it).
//   - quant_method "compressed-tensors", format "float-quantized" (llm-compressor FP8): one config
//     group of 8-bit float weights with strategy tensor ([1] or [] scale) or channel ([out, 1]),
//     `weight_scale` multiplies; input_activations dynamic per token, static per tensor (each
//     Linear's `input_scale`), or absent (weight-only);
//     `ignore` lists module names, or regexes after "re:" (anchored at the start).
//   - quant_method "mxfp4" (GPT-OSS as released): the experts' `*_blocks` / `*_scales` tensors
//     (ImportGraph::mxfp4_weight); modules_to_not_convert as for fp8. Every other tensor is float.
//   - quant_method "modelopt" with quant_algo "NVFP4" (NVIDIA ModelOpt exports; the same keys as
//     hf_quant_config.json's "quantization"): group_size 16; per Linear `weight` U8 [out, in/2]
//     (two E2M1 codes per byte), `weight_scale` F8_E4M3 [out, in/16], `weight_scale_2` F32 scalar
//     (multiplies); `input_scale` (W4A4) is not used (weights only). exclude_modules are
//     wildcard patterns ('*' any run of characters) over module names.
//   - quant_method "compressed-tensors" with format "nvfp4-pack-quantized" (llm-compressor
//     NVFP4): per Linear `weight_packed` U8 [out, in/2] (same nibble order as ModelOpt),
//     `weight_scale` F8_E4M3 [out, in/16] and `weight_global_scale` F32 [1] that divides (the
//     reciprocal of ModelOpt's weight_scale_2); input_activations (NVFP4 W4A4) are read and run
//     weight-only (W4A16), as ModelOpt's input_scale is. `ignore` as for float-quantized.
//   Both NVFP4 formats take quantized expert weights and quantized dense Linears (the linear op
//   dequantizes 128 rows at a time on the CPU and once at build on CUDA).
//   - weight-only integer codes: quant_method "gptq" (bits 4 / 8, group_size, sym, desc_act,
//     checkpoint_format gptq (v1 zeros) / gptq_v2), "awq" (version gemm, bits 4, zero_point) and
//     "compressed-tensors" format "pack-quantized" (int 4 / 8, strategy group / channel,
//     symmetric or not, actorder); the codes keep the checkpoint's packing (QuantPacking) and
//     are converted once at compile time (framework/core/int_quant.h).
// Everything else (other methods and formats, e5m2, fp8's static activation_scheme, odd block
// sizes, bits other than 4 and 8) is one error naming config.json and the key.
//
// Which tensors are quantized is decided per tensor by the checkpoint itself: a weight is FP8 iff
// it is F8_E4M3 and its scale sibling ("<key>" + scale_suffix) exists; the config's ignore lists
// only have to agree (an ignored module with F8 codes is an error naming it).
#pragma once

#include <cstdint>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "framework/core/quant.h"
#include "framework/import/config_reader.h"
#include "proto/model.pb.h"

namespace mg {

struct HfQuantization {
  enum class Method {
    kNone,                    // no quantization_config
    kFp8Block,                // quant_method "fp8"
    kCompressedTensorsFp8,    // quant_method "compressed-tensors", format "float-quantized"
    kMxfp4,                   // quant_method "mxfp4" (GPT-OSS: experts as *_blocks / *_scales)
    kModelOptNvfp4,           // quant_method "modelopt", quant_algo "NVFP4"
    kCompressedTensorsNvfp4,  // quant_method "compressed-tensors", format "nvfp4-pack-quantized"
    // Weight-only integer codes (hf_quantization.cc read_gptq / read_awq /
    // read_compressed_tensors_int; `integer` holds the details):
    kGptq,                  // quant_method "gptq"
    kAwq,                   // quant_method "awq", version "gemm"
    kCompressedTensorsInt,  // quant_method "compressed-tensors", format "pack-quantized"
  };
  // Integer weight-only checkpoints: how every quantized module stores its codes.
  struct Integer {
    int bits = 4;                   // 4 or 8
    int64_t group_cols = -1;        // group_size, -1 channel-wise
    bool symmetric = true;          // no zero-point tensor (compressed-tensors) / informational
    bool act_order = false;         // desc_act / actorder "group": a g_idx per module
    int64_t zero_point_offset = 0;  // GPTQ v1 ("gptq" checkpoint_format): 1
    proto::QuantPacking packing = proto::QUANT_PACKING_NONE;
    // Entry suffixes of module "<m>": "<m>.<codes>", "<m>.<scale>", ...
    std::string codes, scale, zero_point, g_idx;
    bool zero_point_required = false;  // GPTQ and AWQ always store qzeros
  };
  Integer integer;
  bool is_integer() const {
    return method == Method::kGptq || method == Method::kAwq ||
           method == Method::kCompressedTensorsInt;
  }
  Method method = Method::kNone;
  // "fp8 (128x128 blocks)", "compressed-tensors float-quantized (per channel)" for messages.
  std::string description;
  // Scale group of every quantized checkpoint matrix: {rows, cols} blocks, per channel {1, -1} or
  // per tensor {-1, -1}.
  GroupShape group;
  // The scale entry of weight "<key>" is "<key><scale_suffix>": "_scale_inv" (fp8) or "_scale"
  // (compressed-tensors), so "x.weight" -> "x.weight_scale_inv".
  std::string scale_suffix;
  // How consumers treat the activations a quantized weight multiplies.
  proto::ActivationQuantization activation = proto::ACT_QUANT_NONE;
  int64_t activation_group = 0;  // ACT_QUANT_DYNAMIC: 128 or -1 (per token)
  // ACT_QUANT_STATIC: weight "<module>.weight" has its activation scale in "<module>.input_scale"
  // (compressed-tensors; one F32/BF16/F16 element, shape [] or [1]).

  struct IgnoreRule {
    std::string text;  // as config.json writes it
    std::optional<std::regex> regex;
    bool suffix_matches = false;  // transformers: a module whose name ends with `text`
  };
  std::string ignore_key;  // "modules_to_not_convert" or "ignore"
  std::vector<IgnoreRule> ignore;

  bool quantized() const { return method != Method::kNone; }
  bool is_nvfp4() const {
    return method == Method::kModelOptNvfp4 || method == Method::kCompressedTensorsNvfp4;
  }
  // The ignore entry `module` (e.g. "model.layers.0.mlp.gate") matches, or nullptr.
  const IgnoreRule* ignored_by(const std::string& module) const;
};

// Reads `quantization_config` of `config` (absent or null: Method::kNone).
HfQuantization read_hf_quantization(const ConfigReader& config);

// (fp4) Reads hf_quant_config.json's "quantization" object (ModelOpt exports without a
// quantization_config in config.json).
HfQuantization read_modelopt_quant_config(const ConfigReader& quantization);

}  // namespace mg
