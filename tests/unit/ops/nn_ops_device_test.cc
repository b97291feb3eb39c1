// The dense nn ops have CPU kernels only: every other device is a clear error, and every op is
// registered under its name.
#include <gtest/gtest.h>

#include "ops/registry.h"
#include "tests/unit/ops/nn_test_util.h"

namespace mg {
namespace {

TEST(DenseOps, AreRegisteredAndHaveNoKernelForCuda) {
  for (const char* op : {"embedding", "rms_norm", "linear", "rope", "attention", "gated_mlp"}) {
    SCOPED_TRACE(op);
    const OpDef* def = OpRegistry::global().find(op);
    ASSERT_NE(def, nullptr);
    EXPECT_EQ(def->name(), op);
    EXPECT_EQ(def->num_outputs(), 1);
    proto::Node node;
    node.set_op(op);
    CompileOptions options;
    options.device = Device::cuda(0);
    const KernelContext ctx{node, options, {}, {}};
    testing::expect_error([&] { def->create_kernel(ctx); },
                          {fmt::format("op {} has no kernel for cuda:0", op)});
  }
}

}  // namespace
}  // namespace mg
