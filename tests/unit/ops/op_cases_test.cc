// The shared op case table (tests/testing/op_cases.cc) itself: every case named once, every op
// swept over the sizes users bring, and a GPU skip only with its reason. The cases run in each op's
// own test (CPU) and in tests/cuda/ (GPU).
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>

#include "tests/testing/op_cases.h"

namespace mg {
namespace {

TEST(OpCases, EveryCaseHasItsOwnName) {
  std::set<std::string> names;
  for (const testing::OpCase& c : testing::op_cases()) {
    EXPECT_TRUE(names.insert(c.name).second) << "two cases are named '" << c.name << "'";
    EXPECT_EQ(c.name.rfind(c.node.op() + " ", 0), 0u) << c.name << " does not start with its op";
  }
}

// The sizes users bring, for every op: one token and many (a prefill), and a width that is not
// a multiple of 8 (odd or prime), so no kernel is tested only on friendly shapes.
TEST(OpCases, EveryOpIsSweptOverOneTokenManyTokensAndAnOddWidth) {
  struct Seen {
    bool one_token = false, many_tokens = false, odd_width = false;
  };
  std::map<std::string, Seen> seen;
  for (const testing::OpCase& c : testing::op_cases()) {
    Seen& s = seen[c.node.op()];
    const Shape& first = c.inputs.at(0).shape;
    s.one_token |= first.at(0) == 1;
    s.many_tokens |= first.at(0) >= 64;
    for (const testing::CaseInput& in : c.inputs) {
      if (in.fill != testing::CaseInput::Fill::kI32 && !in.shape.empty()) {
        s.odd_width |= in.shape.back() % 8 != 0;
      }
    }
  }
  EXPECT_EQ(seen.size(), 10u) << "the table lost or gained an op: update the CPU and CUDA tests";
  for (const auto& [op, s] : seen) {
    SCOPED_TRACE(op);
    EXPECT_TRUE(s.one_token);
    EXPECT_TRUE(s.many_tokens);
    EXPECT_TRUE(s.odd_width);
  }
}

// A case the GPU does not run says why, and the CPU still runs it.
TEST(OpCases, GpuSkipsAreFewAndExplained) {
  size_t cpu_only = 0;
  for (const testing::OpCase& c : testing::op_cases()) {
    if (c.cpu_only.empty()) continue;
    ++cpu_only;
    EXPECT_GT(c.cpu_only.size(), 20u) << c.name << ": '" << c.cpu_only << "' is not a reason";
  }
  EXPECT_LT(cpu_only * 20, testing::op_cases().size());
}

}  // namespace
}  // namespace mg
