// Pass 2: per-op parameter checks and shape/dtype inference (see
// framework/graph/shape_inference.h), float activations typed in the activation dtype the options
// select (activation_dtype_of: F32 on the CPU, BF16 by default on CUDA).
#include "framework/compile/pass.h"
#include "framework/graph/shape_inference.h"

namespace mg {

namespace {
class InferShapesPass final : public Pass {
 public:
  std::string_view name() const override { return "infer-shapes"; }
  void run(CompileState& state) const override {
    infer_shapes(state.graph, activation_dtype_of(state.options));
  }
};
}  // namespace

std::unique_ptr<Pass> make_infer_shapes_pass() {
  return std::make_unique<InferShapesPass>();
}

}  // namespace mg
