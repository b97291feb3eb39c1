// `moegraph bench soak` on the CPU: decode steps of the bundled MoE model with host memory flat,
// and the check failing when memory does grow (a deliberate leak through its test flag). The
// 10,000-step run is the command itself: `moegraph bench soak --steps 10000` (docs/performance.md).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/testing/command.h"

namespace mg {
namespace {

using ::testing::HasSubstr;

TEST(Soak, CpuDecodeStepsKeepHostMemoryFlat) {
  const testing::CommandResult r =
      testing::run_moegraph({"bench", "soak", "--device", "cpu", "--steps", "1500"});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("memory at start: host RSS"));
  EXPECT_THAT(r.out, HasSubstr("memory at end:   host RSS"));
  EXPECT_THAT(r.out, HasSubstr("1500 decode steps"));
}

TEST(Soak, ALeakFailsTheCheck) {
  // 64 KiB a step over 300 steps: ~19 MiB, over the 8 MiB limit.
  const testing::CommandResult r = testing::run_moegraph(
      {"bench", "soak", "--device", "cpu", "--steps", "300", "--leak-bytes-per-step", "65536"});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_THAT(r.err, HasSubstr("memory grew over the decode steps"));
}

}  // namespace
}  // namespace mg
