// Every dense nn op is registered under its name. In a build without CUDA a GPU device is a
// clear error; with CUDA the ops build GPU kernels (tested against the CPU in tests/cuda/).
#include <gtest/gtest.h>

#include "framework/device/allocator.h"
#include "framework/op/op_registry.h"
#include "tests/unit/ops/nn_test_util.h"

namespace mg {
namespace {

TEST(DenseOps, AreRegisteredAndRefuseCudaInCpuOnlyBuilds) {
  for (const char* op : {"embedding", "rms_norm", "linear", "rope", "attention", "gated_mlp"}) {
    SCOPED_TRACE(op);
    const OpDef* def = OpRegistry::global().find(op);
    ASSERT_NE(def, nullptr);
    EXPECT_EQ(def->name(), op);
    EXPECT_EQ(def->num_outputs(), 1);
    if (built_with_cuda()) continue;
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
