// The compile pipeline: small passes, one per file, each transforming a CompileState.
//   verify → infer shapes → place weights → select kernels → plan memory
#pragma once

#include <memory>
#include <string_view>
#include <vector>

#include "framework/compile/compile_options.h"
#include "framework/compile/execution_plan.h"
#include "framework/io/weight_store.h"

namespace mg {

struct CompileState {
  Graph graph;
  CompileOptions options;
  std::unique_ptr<WeightStore> weights;
  std::unique_ptr<ExecutionPlan> plan;
};

class Pass {
 public:
  virtual ~Pass() = default;
  virtual std::string_view name() const = 0;
  virtual void run(CompileState& state) const = 0;
};

std::unique_ptr<Pass> make_verify_pass();
std::unique_ptr<Pass> make_infer_shapes_pass();
std::unique_ptr<Pass> make_place_weights_pass();
std::unique_ptr<Pass> make_select_kernels_pass();
std::unique_ptr<Pass> make_plan_memory_pass();

}  // namespace mg
