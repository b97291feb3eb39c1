// `moegraph make-model --family NAME --out DIR`: a model with deterministic random weights.
#include <iostream>
#include <optional>

#include "framework/core/checked_math.h"
#include "framework/core/error.h"
#include "framework/core/host_memory.h"
#include "framework/core/int_quant.h"
#include "framework/graph/graph_check.h"
#include "framework/io/proto_dtype.h"
#include "framework/io/regular_file.h"
#include "framework/text/byte_level_tokenizer.h"
#include "models/builders/decoder_builder.h"
#include "tools/moegraph/commands.h"
#include "tools/moegraph/flag_checks.h"

namespace mg::cli {

namespace {

struct MakeModelArgs {
  std::string family = "llama";
  std::string out;
  std::string dtype = "bf16";
  std::string quant = "none";
  bool graph_only = false;
  DecoderSpec spec;
  // Flags the user set explicitly override the family's defaults.
  std::vector<std::pair<CLI::Option*, std::function<void(DecoderSpec&)>>> overrides;
  std::vector<CLI::Option*> sizes;  // the size flags, named in size errors when set
};

DType parse_weight_dtype(const std::string& text) {
  if (text == "f32") return DType::kF32;
  if (text == "bf16") return DType::kBF16;
  if (text == "f16") return DType::kF16;
  MG_FAIL("--dtype: unknown weight dtype '{}' (expected f32, bf16 or f16)", text);
}

proto::MoEQuantScheme parse_moe_quant(const std::string& text) {
  if (text == "none") return proto::MOE_QUANT_UNQUANTIZED;
  if (text == "fp8-block") return proto::MOE_QUANT_FP8_BLOCK;
  if (text == "fp8-channel") return proto::MOE_QUANT_FP8_PER_CHANNEL;
  if (text == "fp8-tensor") return proto::MOE_QUANT_FP8_PER_TENSOR;
  if (text == "mxfp4") return proto::MOE_QUANT_MXFP4;
  if (text == "nvfp4") return proto::MOE_QUANT_NVFP4;
  if (parse_int_quant(text)) {
    return quant_element_bits(parse_int_quant(text)->first) == 4
               ? proto::MOE_QUANT_INT4_WEIGHT_ONLY
               : proto::MOE_QUANT_INT8_WEIGHT_ONLY;
  }
  MG_FAIL(
      "--quant: unknown expert quantization '{}' (expected none, fp8-block, fp8-channel, "
      "fp8-tensor, mxfp4, nvfp4, or weight-only int4-g32|g64|g128|channel, uint4-... (zero "
      "points), int8-..., uint8-...)",
      text);
}

// The most bytes of weights make-model declares in one model (--graph-only): 16 TiB, above the
// largest open MoE checkpoints (about 2 TB). Without --graph-only the weights are made in memory
// before they are written, so they must also fit the machine's memory.
constexpr uint64_t kMaxModelBytes = uint64_t{1} << 44;

// Checks the weights `model` declares before any is made or anything is written: each within
// kMaxAllocationBytes (run allocates each weight in one piece), their sum within kMaxModelBytes
// and, when they are made here, within the machine's memory. `flags` names the sizes the user
// set, for the message.
void check_weight_bytes(const proto::Model& model, bool graph_only, const std::string& flags) {
  const std::string hint = flags.empty() ? std::string("the family's defaults")
                                         : fmt::format("the sizes set ({})", flags);
  uint64_t total = 0;
  for (const proto::TensorInfo& t : model.tensors()) {
    const Shape shape(t.shape().begin(), t.shape().end());
    const DType dtype = from_proto(t.dtype(), t.name());
    const std::optional<size_t> bytes = checked_nbytes(shape, dtype);
    MG_CHECK(bytes && *bytes <= kMaxAllocationBytes,
             "make-model: weight '{}' {}{} would take more than the {} one tensor may take; "
             "lower {}",
             t.name(), dtype_name(dtype), shape_str(shape), byte_size_str(kMaxAllocationBytes),
             hint);
    const std::optional<uint64_t> sum = checked_add<uint64_t>(total, *bytes);
    MG_CHECK(sum && *sum <= kMaxModelBytes,
             "make-model: the weights would take more than the {} one model may take; lower {}",
             byte_size_str(kMaxModelBytes), hint);
    total = *sum;
  }
  const uint64_t memory = host_memory_bytes();
  MG_CHECK(graph_only || memory == 0 || total <= memory,
           "make-model: the weights would take {}, more than this machine's {} of memory they "
           "are made in; lower {}, or write the graph only (--graph-only) and run it with "
           "--random-weights",
           byte_size_str(total), byte_size_str(memory), hint);
}

int make_model(MakeModelArgs& a) {
  const Family& family = find_family(a.family);
  DecoderSpec spec;
  spec.family = family.name;
  family.configure(spec);
  for (auto& [opt, apply] : a.overrides) {
    if (opt->count() > 0) apply(spec);
  }
  spec.weight_dtype = parse_weight_dtype(a.dtype);
  spec.moe_quant = parse_moe_quant(a.quant);
  if (const auto int_quant = parse_int_quant(a.quant)) {
    spec.moe_quant_element = int_quant->first;
    spec.moe_quant_group = int_quant->second;
  }
  std::string flags;
  for (CLI::Option* opt : a.sizes) {
    if (opt->count() > 0) {
      flags += fmt::format("{}{} {}", flags.empty() ? "" : " ", opt->get_name(),
                           fmt::join(opt->results(), " "));
    }
  }
  const std::filesystem::path out(a.out);
  check_output_dir(out, "--out");
  const proto::Model declared = build_decoder(spec, /*graph_only=*/true).model();
  check_weight_bytes(declared, a.graph_only, flags);
  check_graph_runs(declared, out / GraphBuilder::kGraphFile, "these flags");
  GraphBuilder b = build_decoder(spec, a.graph_only);
  b.write(out);
  // Ids 0..255 stand for the bytes: text in and out through a byte-level tokenizer.json.
  if (spec.vocab >= 256) {
    write_file_atomically(out / "tokenizer.json", text::byte_level_tokenizer_json(), "--out");
  }
  std::cout << fmt::format("wrote {} ({} nodes, {} tensors) to {}\n", b.model().name(),
                           b.model().nodes_size(), b.model().tensors_size(), a.out);
  return 0;
}

}  // namespace

Command add_make_model_command(CLI::App& app) {
  auto args = std::make_shared<MakeModelArgs>();
  CLI::App* cmd = app.add_subcommand(
      "make-model", "Write a model with deterministic random weights (graph + safetensors)");
  std::string families_help = "Model family:";
  for (const Family& f : families()) families_help += "\n  " + f.name + ": " + f.description;
  cmd->add_option("--family", args->family, families_help)->capture_default_str();
  cmd->add_option("--out", args->out, "Output directory")->required();
  cmd->add_option("--dtype", args->dtype, "Weight dtype: f32, bf16 or f16")->capture_default_str();
  cmd->add_option("--quant", args->quant,
                  "Expert weights: none, or FP8 E4M3 quantized from the random values with "
                  "128x128 block scales (fp8-block, DeepSeek-V3's format), one scale per row "
                  "(fp8-channel) or per projection (fp8-tensor); FP8 models quantize activations "
                  "dynamically (W8A8); FP4 E2M1, weight-only: mxfp4 (E8M0 scale per 32 "
                  "values, GPT-OSS's format) or nvfp4 (E4M3 scale per 16 values and an F32 "
                  "global scale per matrix); weight-only integer codes (W4A16 / W8A16): int4-g32, "
                  "int4-g64, int4-g128, int4-channel, uint4-... (asymmetric, zero points), "
                  "int8-..., uint8-...")
      ->capture_default_str();
  cmd->add_flag("--graph-only", args->graph_only,
                "Write only the graph (weights declared, no weight file): run it with "
                "--random-weights");
  DecoderSpec& s = args->spec;
  // Every size has a range (README.md lists them) wide enough for today's largest open models;
  // the weights' total is checked before anything is made (check_weight_bytes).
  auto size = [&](const char* flag, int64_t DecoderSpec::*field, int64_t min, int64_t max,
                  const char* help) {
    CLI::Option* opt = cmd->add_option(flag, s.*field, help)->check(int_range(min, max));
    args->sizes.push_back(opt);
    // A raw pointer: the lambda is stored in *args, so a shared_ptr here would be a cycle that is
    // never freed (LeakSanitizer reported it); the command holds args for as long as it runs.
    args->overrides.emplace_back(
        opt, [a = args.get(), field](DecoderSpec& spec) { spec.*field = a->spec.*field; });
  };
  size("--layers", &DecoderSpec::layers, 1, 1024, "Decoder layers");
  size("--hidden", &DecoderSpec::hidden, 1, 65536, "Hidden size");
  size("--heads", &DecoderSpec::heads, 1, 1024, "Attention heads");
  size("--kv-heads", &DecoderSpec::kv_heads, 1, 1024, "KV heads");
  size("--head-dim", &DecoderSpec::head_dim, 1, 4096, "Head dimension");
  size("--inter", &DecoderSpec::intermediate, 1, 1 << 20, "Dense MLP width");
  size("--vocab", &DecoderSpec::vocab, 1, 1 << 24, "Vocabulary size");
  size("--max-seq-len", &DecoderSpec::max_seq_len, 1, kMaxSeqLen, "Longest sequence");
  size("--experts", &DecoderSpec::experts, 1, 4096, "Routed experts (MoE families)");
  size("--topk", &DecoderSpec::top_k, 1, 4096, "Experts per token (MoE families)");
  size("--moe-inter", &DecoderSpec::moe_intermediate, 1, 1 << 20, "Expert width (MoE families)");
  size("--shared-inter", &DecoderSpec::shared_intermediate, 0, 1 << 20,
       "Shared expert width (MoE families)");
  size("--first-dense", &DecoderSpec::first_dense_layers, 0, 1024,
       "Leading dense layers (MoE families)");
  size("--sliding-window", &DecoderSpec::sliding_window, 0, kMaxSeqLen,
       "Sliding attention window of the even layers, the GPT-OSS pattern (0: every layer "
       "attends to the whole context; gpt_oss's default is 4, its released models' 128)");
  CLI::Option* seed = cmd->add_option("--seed", s.seed, "Random seed")
                          ->capture_default_str()
                          ->check(non_negative_u64());
  MakeModelArgs* a = args.get();  // as in size(): no shared_ptr inside *args
  args->overrides.emplace_back(seed, [a](DecoderSpec& spec) { spec.seed = a->spec.seed; });
  CLI::Option* tie = cmd->add_flag("--tie-embeddings", s.tie_embeddings, "lm_head = embedding");
  args->overrides.emplace_back(
      tie, [a](DecoderSpec& spec) { spec.tie_embeddings = a->spec.tie_embeddings; });
  return [args] {
    args->spec.family = args->family;
    return make_model(*args);
  };
}

}  // namespace mg::cli
