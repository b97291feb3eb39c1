// Issue 18, class 2: thread and rank counts are bounded, and a thread the system refuses is an
// mg::Error (exit code 2 in the command), not std::terminate from a joinable std::thread.
#include <sys/resource.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "framework/core/error.h"
#include "framework/core/thread_pool.h"
#include "framework/parallel/parallel_config.h"

namespace mg {
namespace {

TEST(ThreadLimits, PoolsAboveTheBoundAreRefused) {
  EXPECT_GE(max_threads(), 64);
  EXPECT_THROW(ThreadPool(max_threads() + 1), Error);
  EXPECT_THROW(ThreadPool(100000), Error);
  ThreadPool ok(4);
  EXPECT_EQ(ok.size(), 4);
}

TEST(ThreadLimits, RanksAboveTheBoundAreRefusedWithoutOverflow) {
  EXPECT_NO_THROW(ParallelConfig(8, 0, 8, 0, false));
  EXPECT_THROW(ParallelConfig(8, 0, 16, 0, false), Error);
  // 65536 x 65536 wraps a 32-bit int to 0.
  EXPECT_THROW(ParallelConfig(65536, 0, 65536, 0, false), Error);
}

// Bytes of address space this process maps now (VmSize in /proc/self/status).
uint64_t mapped_bytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.starts_with("VmSize:")) return std::strtoull(line.c_str() + 7, nullptr, 10) * 1024;
  }
  return 0;
}

// Runs in a child process whose address space leaves room for a few 8 MiB thread stacks only: a
// pool of 64 threads fails to start one, and the constructor must stop the ones it started and
// throw mg::Error (a joinable std::thread destroyed by the unwinding would call std::terminate).
// Exits 0 when it does.
[[noreturn]] void start_a_pool_in_too_little_address_space() {
  const uint64_t limit = mapped_bytes() + (uint64_t{48} << 20);
  const rlimit as{limit, limit};
  if (setrlimit(RLIMIT_AS, &as) != 0) std::_Exit(3);
  try {
    ThreadPool pool(64);
    std::_Exit(4);  // every thread started: the limit did not bite
  } catch (const Error& e) {
    std::_Exit(std::strstr(e.what(), "refused a new thread") != nullptr ? 0 : 5);
  }
}

TEST(ThreadLimits, RefusedThreadIsAnErrorAndStopsTheStartedOnes) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "AddressSanitizer cannot run in the small address space this test sets up";
#endif
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(start_a_pool_in_too_little_address_space(), ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace mg
