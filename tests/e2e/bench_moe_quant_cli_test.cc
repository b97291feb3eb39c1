// `moegraph bench moe --quant` on the command line, in any build: the weight-only integer names
// are make-model's (int4-g128, uint4-g32, int8-channel, ...: tools/moegraph/flag_checks.h
// parse_int_quant, shared by both commands), a name neither takes is refused while the flags are
// parsed, and a valid one on a machine without a GPU is the user's environment (exit 2, one
// line). The timing itself needs a GPU: tests/cuda/moe_bench_check_cuda_test.cc.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>

#include "tests/testing/command.h"
#include "tests/testing/test_util.h"

namespace mg {
namespace {

using testing::CommandResult;
using ::testing::HasSubstr;
using ::testing::Not;

CommandResult run(const std::vector<std::string>& args) {
  testing::CommandLimits limits;
  limits.timeout_seconds = 60;
  // CUDA_VISIBLE_DEVICES="" hides the GPUs of a GPU machine too, so this runs everywhere.
  return testing::run_moegraph(args, limits, {{"CUDA_VISIBLE_DEVICES", ""}});
}

void expect_one_line_exit_2(const CommandResult& r, const std::vector<std::string>& fragments) {
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  for (const std::string& f : fragments) EXPECT_THAT(r.err, HasSubstr(f));
  EXPECT_THAT(r.err, Not(HasSubstr("internal error")));
}

TEST(BenchMoeQuantCli, IntegerNamesAreMakeModels) {
  for (const char* name :
       {"int4-g128", "uint4-g32", "int8-channel", "uint8-g64", "int4-channel", "int8-g128"}) {
    SCOPED_TRACE(name);
    // Accepted by the flag parser: what stops it is the missing GPU, said before any CUDA call.
    expect_one_line_exit_2(run({"bench", "moe", "--quant", name, "--tokens", "1"}),
                           {"bench moe", "CUDA"});
  }
}

TEST(BenchMoeQuantCli, OtherNamesAreRefusedByTheFlagParser) {
  for (const char* name : {"int4-g96", "int3-g128", "w4a16", "int4"}) {
    SCOPED_TRACE(name);
    const CommandResult r = run({"bench", "moe", "--quant", name});
    expect_one_line_exit_2(r, {"--quant", name});
    EXPECT_THAT(r.err, Not(HasSubstr("CUDA"))) << "refused before the device is looked at";
  }
  // make-model refuses the same names with its own list.
  const auto dir = testing::temp_dir("bench-quant-cli");
  expect_one_line_exit_2(
      run({"make-model", "--family", "qwen3_moe", "--quant", "int4-g96", "--out", dir.string()}),
      {"--quant", "int4-g96", "int4-g32|g64|g128|channel"});
}

}  // namespace
}  // namespace mg
