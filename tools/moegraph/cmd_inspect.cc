// `moegraph inspect MODEL [--plan]`: print the graph, its values typed as they run on --device
// (float activations in the activation dtype), and with --plan the compiled plan (kernel choices,
// MoE oracle decisions with reasons, arena layout).
#include <iostream>
#include <map>

#include "framework/compile/compiler.h"
#include "framework/core/checked_math.h"
#include "framework/graph/graph.h"
#include "framework/graph/shape_inference.h"
#include "framework/graph/verifier.h"
#include "framework/io/graph_loader.h"
#include "tools/moegraph/commands.h"
#include "tools/moegraph/flag_checks.h"

namespace mg::cli {

namespace {

struct InspectArgs {
  std::string model;
  bool plan = false;
  std::string device = "cpu";
  std::string dtype;
  std::string moe_backend;
  std::string activation_quant = "dynamic";
  int64_t max_tokens = 512;
};

void print_graph(const Graph& g) {
  const proto::Model& m = g.model();
  std::cout << fmt::format("model '{}' (format version {}, family {}, vocab {}, max_seq_len {})\n",
                           m.name(), m.format_version(), m.info().family(), m.info().vocab_size(),
                           m.info().max_seq_len());
  for (const auto& in : m.inputs()) {
    std::cout << "  input  " << in.name() << " " << value_type_str(*g.value(in.name()).type)
              << "\n";
  }
  for (const auto& out : m.outputs()) {
    std::cout << "  output " << out.name() << " " << value_type_str(*g.value(out.name()).type)
              << "\n";
  }
  size_t bytes = 0;
  std::map<std::string, int> dtypes;
  for (const auto& t : m.tensors()) {
    const ValueType& type = *g.value(t.name()).type;
    bytes += static_cast<size_t>(shape_numel(type.shape)) * dtype_size(type.dtype);
    ++dtypes[std::string(dtype_name(type.dtype))];
  }
  std::vector<std::string> dtype_counts;
  for (const auto& [d, n] : dtypes) dtype_counts.push_back(fmt::format("{} {}", n, d));
  std::cout << fmt::format("  {} weight tensors, {:.2f} MiB ({})\n", m.tensors_size(),
                           bytes / 1048576.0, fmt::join(dtype_counts, ", "));
  std::map<std::string, int> ops;
  for (const auto& n : m.nodes()) ++ops[n.op()];
  std::vector<std::string> op_counts;
  for (const auto& [op, n] : ops) op_counts.push_back(fmt::format("{} {}", n, op));
  std::cout << fmt::format("  {} nodes ({})\n", m.nodes_size(), fmt::join(op_counts, ", "));
  for (int i : g.order()) {
    const proto::Node& n = g.node(i);
    std::vector<std::string> ins, outs;
    for (const auto& in : n.inputs()) ins.push_back(in.empty() ? "-" : in);
    for (const auto& out : n.outputs()) {
      outs.push_back(fmt::format("{} {}", out, value_type_str(*g.value(out).type)));
    }
    std::cout << fmt::format("  {:<28} {:<10} ({}) -> {}\n", n.name(), n.op(), fmt::join(ins, ", "),
                             fmt::join(outs, ", "));
  }
}

int inspect(const InspectArgs& a) {
  const std::filesystem::path path = resolve_model(a.model);
  CompileOptions options;
  options.device = Device::parse(a.device);
  if (!a.dtype.empty()) options.activation_dtype = parse_activation_dtype(a.dtype);
  options.moe_backend = a.moe_backend;
  options.quantize_activations = a.activation_quant != "none";
  options.quantize_dense_activations = a.activation_quant == "dynamic";
  options.max_tokens = a.max_tokens;
  // The graph's float activations are printed in the dtype they run in on this device.
  const DType activation_dtype = activation_dtype_of(options);
  Graph graph(load_graph(path), path);
  verify_graph(graph);
  infer_shapes(graph, activation_dtype);
  std::cout << fmt::format("activations in {} on {}\n", dtype_name(activation_dtype),
                           options.device.str());
  print_graph(graph);
  if (a.plan) {
    auto plan = compile_graph_file(path, options);
    std::cout << "\n" << plan->describe();
  }
  return 0;
}

}  // namespace

Command add_inspect_command(CLI::App& app) {
  auto args = std::make_shared<InspectArgs>();
  CLI::App* cmd = app.add_subcommand("inspect", "Print a model's graph and, with --plan, its plan");
  cmd->add_option("MODEL", args->model, "Graph file or directory; default: the bundled model");
  cmd->add_flag("--plan", args->plan,
                "Compile and print the plan: kernels, MoE backend choices with reasons, memory");
  cmd->add_option("--device", args->device,
                  "Device to type the activations and, with --plan, to compile for")
      ->capture_default_str();
  cmd->add_option("--dtype", args->dtype,
                  "Activation dtype: bf16, f16 or f32 (default: f32 on cpu, bf16 on cuda)");
  cmd->add_option("--activation-quant", args->activation_quant,
                  "Activations of FP8 (W8A8) weights: dynamic (quantized per call wherever the "
                  "checkpoint says: W8A8), experts (the MoE experts' only; dense ops keep theirs) "
                  "or none (W8A16: weights read as FP8, activations kept in the compute dtype)")
      ->capture_default_str()
      ->check(CLI::IsMember({"dynamic", "experts", "none"}));
  cmd->add_option("--moe-backend", args->moe_backend, "Force an expert backend (with --plan)");
  cmd->add_option("--max-tokens", args->max_tokens, "Largest forward chunk (with --plan)")
      ->capture_default_str()
      ->check(int_range(1, kMaxTokensPerForward));
  return [args] { return inspect(*args); };
}

}  // namespace mg::cli
