// Must NOT compile: framework code including an ops/ header. tests/CMakeLists.txt builds this with
// mg_framework's include root and expects the include to be not found (docs/architecture.md,
// "Layering").
#include "framework/op/op_registry.h"
#include "ops/builtin_ops.h"
