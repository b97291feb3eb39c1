// Must NOT compile: a model builder including an ops/ header. tests/CMakeLists.txt builds this with
// mg_models' include root and expects the include to be not found (docs/architecture.md,
// "Layering").
#include "models/builders/graph_builder.h"
#include "ops/builtin_ops.h"
