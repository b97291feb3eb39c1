// main() of every test executable: registers the built-in ops (the framework knows none by
// itself; ops/builtin_ops.h) and runs GoogleTest.
#include <gtest/gtest.h>

#include "framework/op/op_registry.h"
#include "ops/builtin_ops.h"

int main(int argc, char** argv) {
  mg::register_builtin_ops(mg::OpRegistry::global());
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
