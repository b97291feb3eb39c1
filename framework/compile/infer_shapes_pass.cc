// Pass 2: per-op parameter checks and shape/dtype inference (see
// framework/graph/shape_inference.h).
#include "framework/compile/pass.h"
#include "framework/graph/shape_inference.h"

namespace mg {

namespace {
class InferShapesPass final : public Pass {
 public:
  std::string_view name() const override { return "infer-shapes"; }
  void run(CompileState& state) const override { infer_shapes(state.graph); }
};
}  // namespace

std::unique_ptr<Pass> make_infer_shapes_pass() {
  return std::make_unique<InferShapesPass>();
}

}  // namespace mg
