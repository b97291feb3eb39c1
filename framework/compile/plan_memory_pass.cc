// Pass 5: plans the activation arena. Every activation (graph inputs and node outputs) gets a
// byte range sized for max_tokens, live from the step that writes it to the last step that reads
// it (graph outputs: to the end). Values whose live ranges overlap never share bytes; the others
// are packed first-fit in order of definition. Offsets are 64-byte aligned.
//
// Every value is sized in the dtype shape inference recorded, which for float activations is
// already the activation dtype the kernels read and write (framework/graph/shape_inference.h).
#include <algorithm>

#include "framework/compile/pass.h"
#include "framework/core/checked_math.h"
#include "framework/core/logging.h"

namespace mg {

namespace {

constexpr size_t kAlign = 64;

// Bytes of `value` at max_tokens rows, 64-byte aligned. Throws mg::Error naming the value and
// --max-tokens when the size overflows or passes kMaxAllocationBytes: max_tokens is the only
// factor a user picks per run, and the graph's own dimensions were bounded by its weights.
size_t bytes_at_max_tokens(const PlanValue& value, int64_t max_tokens) {
  Shape shape = value.type.shape;
  for (int64_t& d : shape) {
    if (d == kTokens) d = max_tokens;
  }
  const std::optional<size_t> bytes = checked_nbytes(shape, value.type.dtype);
  const std::optional<size_t> aligned = bytes ? checked_round_up(*bytes, kAlign) : std::nullopt;
  MG_CHECK(aligned && *aligned <= kMaxAllocationBytes,
           "max_tokens (--max-tokens) {}: activation '{}' {}{} would take more than the {} one "
           "allocation may take; use fewer tokens per forward",
           max_tokens, value.name, dtype_name(value.type.dtype), shape_str(shape),
           byte_size_str(kMaxAllocationBytes));
  return *aligned;
}

class PlanMemoryPass final : public Pass {
 public:
  std::string_view name() const override { return "plan-memory"; }

  void run(CompileState& state) const override {
    ExecutionPlan& plan = *state.plan;
    const int num_steps = static_cast<int>(plan.nodes.size());
    std::vector<int> activations;
    for (size_t v = 0; v < plan.values.size(); ++v) {
      PlanValue& pv = plan.values[v];
      if (pv.source == ValueSource::kWeight) continue;
      pv.first_step = pv.source == ValueSource::kGraphInput ? 0 : num_steps;
      pv.last_step = pv.first_step;
      pv.arena_bytes = bytes_at_max_tokens(pv, plan.max_tokens);
      activations.push_back(static_cast<int>(v));
    }
    for (int step = 0; step < num_steps; ++step) {
      const PlanNode& node = plan.nodes[step];
      for (int v : node.outputs) {
        plan.values[v].first_step = step;
        plan.values[v].last_step = step;
      }
      for (int v : node.inputs) {
        if (v >= 0) plan.values[v].last_step = std::max(plan.values[v].last_step, step);
      }
    }
    for (const proto::ValueInfo& out : state.graph.model().outputs()) {
      plan.values[plan.find_value(out.name())].last_step = num_steps;
    }

    // First fit, in order of definition.
    std::stable_sort(activations.begin(), activations.end(), [&](int a, int b) {
      return plan.values[a].first_step < plan.values[b].first_step;
    });
    std::vector<int> placed;
    size_t total = 0;
    for (int v : activations) {
      PlanValue& pv = plan.values[v];
      std::vector<std::pair<size_t, size_t>> busy;  // [begin, end) of overlapping live values
      for (int w : placed) {
        const PlanValue& pw = plan.values[w];
        if (pw.first_step <= pv.last_step && pv.first_step <= pw.last_step) {
          busy.emplace_back(pw.arena_offset, pw.arena_offset + pw.arena_bytes);
        }
      }
      std::sort(busy.begin(), busy.end());
      size_t offset = 0;
      for (const auto& [begin, end] : busy) {
        if (offset + pv.arena_bytes <= begin) break;
        offset = std::max(offset, end);
      }
      pv.arena_offset = offset;
      // offset <= the arena so far, a sum of values each <= kMaxAllocationBytes: no overflow.
      total = std::max(total, offset + pv.arena_bytes);
      MG_CHECK(total <= kMaxAllocationBytes,
               "max_tokens (--max-tokens) {}: the activation arena would take more than the {} "
               "one allocation may take; use fewer tokens per forward",
               plan.max_tokens, byte_size_str(kMaxAllocationBytes));
      placed.push_back(v);
    }
    plan.arena_bytes = total;
    plan.token_ids = plan.find_value("token_ids");
    plan.positions = plan.find_value("positions");
    plan.logits = plan.find_value("logits");
    MG_LOG_INFO("compile", "{}: activation arena {:.2f} MiB for {} tokens, workspace {:.2f} MiB",
                state.graph.file_label(), total / 1048576.0, plan.max_tokens,
                plan.workspace_bytes / 1048576.0);
  }
};

}  // namespace

std::unique_ptr<Pass> make_plan_memory_pass() {
  return std::make_unique<PlanMemoryPass>();
}

}  // namespace mg
