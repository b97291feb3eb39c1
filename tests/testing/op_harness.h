// Runs one node outside a graph, the way the compiled plan would: infer → place weights →
// create kernel → run. Used by op tests to compare kernels with their references.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "framework/op/op_registry.h"

namespace mg::testing {

// Output types of `node` for the given input types (throws mg::Error like the compiler would).
std::vector<ValueType> infer_op(const proto::Node& node,
                                const std::vector<std::optional<ValueType>>& inputs);

class CompiledOp {
 public:
  // `inputs` holds one tensor per node input (undefined for absent optional inputs); weight
  // inputs are taken from here once, activation inputs only fix the example types.
  CompiledOp(const proto::Node& node, const std::vector<Tensor>& inputs,
             CompileOptions options = {}, int threads = 2);

  // Runs with fresh activation inputs (weights as given at construction). The state (e.g. the
  // KV cache) persists across calls. Returns the outputs as CPU F32 (or I32) tensors.
  std::vector<Tensor> run(const std::vector<Tensor>& inputs);

  OpKernel& kernel() { return *kernel_; }

 private:
  proto::Node node_;
  const OpDef* def_;
  std::vector<Tensor> placed_;
  std::unique_ptr<OpKernel> kernel_;
  std::unique_ptr<OpState> state_;
  std::unique_ptr<ThreadPool> pool_;
  CompileOptions options_;
};

// Compiles and runs once.
std::vector<Tensor> run_cpu_op(const proto::Node& node, const std::vector<Tensor>& inputs,
                               int threads = 2);

}  // namespace mg::testing
