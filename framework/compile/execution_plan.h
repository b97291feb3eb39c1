// ExecutionPlan: the compiled form of a graph for one device. Per node it holds the kernel
// instance (with its prepared weights) and the value slots it reads and writes; activations live
// in one arena planned by liveness, so a forward pass allocates nothing.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "framework/graph/graph.h"
#include "framework/op/op_kernel.h"

namespace mg {

struct PlanValue {
  std::string name;
  ValueType type;  // leading kTokens for activations
  ValueSource source = ValueSource::kNodeOutput;
  // Activations and graph inputs: byte offset in the arena, and the bytes it takes at
  // max_tokens. Live range in node steps [first_step, last_step].
  size_t arena_offset = 0;
  size_t arena_bytes = 0;
  int first_step = 0;
  int last_step = 0;
  // Weights: as placed for compute-placement consumers and as loaded for raw consumers. For a
  // quantized weight, raw_weight holds the codes (for consumers that take them, with `quant`),
  // `dequantized` their host F32 values for raw consumers that do not take codes, and `weight`
  // those values placed for compute consumers.
  Tensor weight;
  Tensor raw_weight;
  WeightQuantization quant;
  Tensor dequantized;
};

struct PlanNode {
  int graph_node = -1;
  std::string name;
  std::string op;
  std::unique_ptr<OpKernel> kernel;
  std::vector<int> inputs;   // PlanValue index per input, -1 when absent
  std::vector<int> outputs;  // PlanValue index per output
  size_t workspace_bytes = 0;
};

class ExecutionPlan {
 public:
  std::string model_name;
  proto::ModelInfo info;
  Device device;
  int64_t max_tokens = 0;
  int64_t max_seq_len = 0;
  std::vector<PlanValue> values;
  std::vector<PlanNode> nodes;  // in execution order
  size_t arena_bytes = 0;
  size_t workspace_bytes = 0;  // the largest any node asks for
  int token_ids = -1;          // PlanValue indices of the decoder's graph inputs and output
  int positions = -1;
  int logits = -1;

  int find_value(const std::string& name) const;  // -1 if absent
  // Human-readable listing for `moegraph inspect --plan`.
  std::string describe() const;
};

}  // namespace mg
