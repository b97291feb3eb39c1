// Options that steer compilation of a graph into an ExecutionPlan.
#pragma once

#include <cstdint>
#include <string>

#include "framework/device/device.h"
#include "framework/parallel/parallel_config.h"

namespace mg {

struct CompileOptions {
  Device device = Device::cpu();
  // Largest token count of one forward call; sizes the activation arena and workspaces.
  int64_t max_tokens = 512;
  // Longest sequence the KV cache holds; 0 means the model's ModelInfo.max_seq_len.
  int64_t max_seq_len = 0;
  // Expert backend forced for every MoE node ("" lets the oracle choose). A forced backend that
  // does not fit a node is an error naming the failed check.
  std::string moe_backend;
  // Where this rank sits among the tensor/data/expert-parallel ranks (single rank by default);
  // MoE nodes shard their experts and pick their token dispatch from it.
  ParallelConfig parallel;
};

}  // namespace mg
