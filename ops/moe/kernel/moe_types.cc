#include "ops/moe/kernel/moe_types.h"

#include "framework/core/error.h"

namespace mg {

std::string_view activation_format_name(ActivationFormat format) {
  switch (format) {
    case ActivationFormat::kStandard:
      return "standard";
    case ActivationFormat::kBatched:
      return "batched";
  }
  return "?";
}

ExpertsShape local_experts_shape(const MoEConfig& config, const ParallelConfig& parallel) {
  const int64_t tp = parallel.moe_tp_size();
  MG_CHECK(config.intermediate_size() % tp == 0,
           "intermediate_size {} cannot be split evenly over {} tensor-parallel ranks ({})",
           config.intermediate_size(), tp, parallel.str());
  ExpertsShape shape;
  shape.num_experts = config.num_experts();
  shape.hidden_size = config.hidden_size();
  shape.intermediate_size = config.intermediate_size() / tp;
  shape.top_k = config.top_k();
  shape.activation = config.activation();
  shape.weight_on_input = config.routing().weight_on_input();
  shape.expert_map = parallel.expert_map(config.num_experts());
  return shape;
}

}  // namespace mg
