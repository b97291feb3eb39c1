// Pass 1: structural checks (see framework/graph/verifier.h).
#include "framework/compile/pass.h"
#include "framework/graph/verifier.h"

namespace mg {

namespace {
class VerifyPass final : public Pass {
 public:
  std::string_view name() const override { return "verify"; }
  void run(CompileState& state) const override { verify_graph(state.graph); }
};
}  // namespace

std::unique_ptr<Pass> make_verify_pass() {
  return std::make_unique<VerifyPass>();
}

}  // namespace mg
