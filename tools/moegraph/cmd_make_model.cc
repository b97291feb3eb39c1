// `moegraph make-model --family NAME --out DIR`: a model with deterministic random weights.
#include <iostream>

#include "framework/core/error.h"
#include "framework/graph/shape_inference.h"
#include "framework/graph/verifier.h"
#include "framework/io/regular_file.h"
#include "models/builders/decoder_builder.h"
#include "tools/moegraph/commands.h"

namespace mg::cli {

namespace {

struct MakeModelArgs {
  std::string family = "llama";
  std::string out;
  std::string dtype = "bf16";
  bool graph_only = false;
  DecoderSpec spec;
  // Flags the user set explicitly override the family's defaults.
  std::vector<std::pair<CLI::Option*, std::function<void(DecoderSpec&)>>> overrides;
};

DType parse_weight_dtype(const std::string& text) {
  if (text == "f32") return DType::kF32;
  if (text == "bf16") return DType::kBF16;
  if (text == "f16") return DType::kF16;
  MG_FAIL("--dtype: unknown weight dtype '{}' (expected f32, bf16 or f16)", text);
}

// Runs the checks `run` starts with (graph verifier and shape inference, which check every op's
// params against its inputs) on the graph before anything is written, so that make-model never
// writes a model that run refuses. The flags' own checks (build_decoder) name the flag; this
// catches the combinations they do not cover and names the node.
void check_graph_runs(const proto::Model& model, const std::filesystem::path& graph_file) {
  Graph graph(model, graph_file);
  try {
    verify_graph(graph);
    infer_shapes(graph);
  } catch (const Error& e) {
    MG_FAIL("these flags make a graph that run would refuse: {}", e.what());
  }
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
  const std::filesystem::path out(a.out);
  check_output_dir(out, "--out");
  check_graph_runs(build_decoder(spec, /*graph_only=*/true).model(),
                   out / GraphBuilder::kGraphFile);
  GraphBuilder b = build_decoder(spec, a.graph_only);
  b.write(out);
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
  cmd->add_flag("--graph-only", args->graph_only,
                "Write only the graph (weights declared, no weight file): run it with "
                "--random-weights");
  DecoderSpec& s = args->spec;
  auto size = [&](const char* flag, int64_t DecoderSpec::*field, const char* help) {
    CLI::Option* opt = cmd->add_option(flag, s.*field, help)->check(CLI::NonNegativeNumber);
    args->overrides.emplace_back(
        opt, [args, field](DecoderSpec& spec) { spec.*field = args->spec.*field; });
  };
  size("--layers", &DecoderSpec::layers, "Decoder layers");
  size("--hidden", &DecoderSpec::hidden, "Hidden size");
  size("--heads", &DecoderSpec::heads, "Attention heads");
  size("--kv-heads", &DecoderSpec::kv_heads, "KV heads");
  size("--head-dim", &DecoderSpec::head_dim, "Head dimension");
  size("--inter", &DecoderSpec::intermediate, "Dense MLP width");
  size("--vocab", &DecoderSpec::vocab, "Vocabulary size");
  size("--max-seq-len", &DecoderSpec::max_seq_len, "Longest sequence");
  size("--experts", &DecoderSpec::experts, "Routed experts (MoE families)");
  size("--topk", &DecoderSpec::top_k, "Experts per token (MoE families)");
  size("--moe-inter", &DecoderSpec::moe_intermediate, "Expert width (MoE families)");
  size("--shared-inter", &DecoderSpec::shared_intermediate, "Shared expert width (MoE families)");
  size("--first-dense", &DecoderSpec::first_dense_layers, "Leading dense layers (MoE families)");
  CLI::Option* seed = cmd->add_option("--seed", s.seed, "Random seed")->capture_default_str();
  args->overrides.emplace_back(seed, [args](DecoderSpec& spec) { spec.seed = args->spec.seed; });
  CLI::Option* tie = cmd->add_flag("--tie-embeddings", s.tie_embeddings, "lm_head = embedding");
  args->overrides.emplace_back(
      tie, [args](DecoderSpec& spec) { spec.tie_embeddings = args->spec.tie_embeddings; });
  return [args] {
    args->spec.family = args->family;
    return make_model(*args);
  };
}

}  // namespace mg::cli
