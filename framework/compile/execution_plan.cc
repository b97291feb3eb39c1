#include "framework/compile/execution_plan.h"

#include <sstream>

namespace mg {

int ExecutionPlan::find_value(const std::string& name) const {
  for (size_t i = 0; i < values.size(); ++i) {
    if (values[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

std::string ExecutionPlan::describe() const {
  std::ostringstream os;
  size_t weight_bytes = 0;
  for (const PlanValue& v : values) weight_bytes += v.weight.defined() ? v.weight.nbytes() : 0;
  os << fmt::format("plan for '{}' on {}: {} nodes, max_tokens {}, max_seq_len {}\n", model_name,
                    device.str(), nodes.size(), max_tokens, max_seq_len);
  os << fmt::format(
      "activation arena {:.2f} MiB, workspace {:.2f} MiB, placed weights {:.2f} MiB\n",
      arena_bytes / 1048576.0, workspace_bytes / 1048576.0, weight_bytes / 1048576.0);
  for (size_t s = 0; s < nodes.size(); ++s) {
    const PlanNode& n = nodes[s];
    std::vector<std::string> outs;
    for (int v : n.outputs) {
      outs.push_back(fmt::format("{} {} @{}", values[v].name, value_type_str(values[v].type),
                                 values[v].arena_offset));
    }
    os << fmt::format("  [{:3}] {:<28} {:<10} -> {}\n", s, n.name, n.op, fmt::join(outs, ", "));
    std::string kernel = n.kernel->describe();
    std::istringstream lines(kernel);
    std::string line;
    bool first = true;
    while (std::getline(lines, line)) {
      os << fmt::format("        {}{}\n", first ? "kernel: " : "        ", line);
      first = false;
    }
    if (n.workspace_bytes) os << fmt::format("        workspace: {} bytes\n", n.workspace_bytes);
  }
  return os.str();
}

}  // namespace mg
