#include "framework/parallel/process_launcher.h"

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "framework/core/error.h"

namespace mg {
namespace {

using ::testing::HasSubstr;
using namespace std::chrono_literals;

std::vector<std::string> sh(const std::string& script) {
  return {"/bin/sh", "-c", script};
}

std::filesystem::path fresh_dir(const std::string& name) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / fmt::format("mg_launcher_{}_{}", name, ::getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

TEST(ProcessLauncher, EveryRankGetsTorchrunVariables) {
  const std::filesystem::path dir = fresh_dir("env");
  LocalLaunchOptions options;
  options.nproc = 4;
  options.master_port = 31234;
  ASSERT_EQ(launch_local_processes(sh("echo $RANK $LOCAL_RANK $WORLD_SIZE $LOCAL_WORLD_SIZE "
                                      "$MASTER_ADDR $MASTER_PORT $NCCL_NVLS_ENABLE > " +
                                      dir.string() + "/$RANK"),
                                   options, 8),
            0);
  // NCCL_NVLS_ENABLE: 0 unless this process has it set already (then that value is kept).
  const char* nvls = std::getenv("NCCL_NVLS_ENABLE");
  for (int r = 0; r < 4; ++r) {
    std::ifstream in(dir / std::to_string(r));
    std::stringstream text;
    text << in.rdbuf();
    EXPECT_EQ(text.str(), fmt::format("{} {} 4 4 127.0.0.1 31234 {}\n", r, r, nvls ? nvls : "0"))
        << "rank " << r;
  }
  std::filesystem::remove_all(dir);
}

TEST(ProcessLauncher, AFailingRankEndsTheOthersAndReturnsItsStatus) {
  LocalLaunchOptions options;
  options.nproc = 3;
  options.kill_grace = 1s;
  const auto start = std::chrono::steady_clock::now();
  // Rank 1 fails at once; ranks 0 and 2 would sleep for a minute.
  EXPECT_EQ(
      launch_local_processes(sh("if [ $RANK = 1 ]; then exit 7; fi; exec sleep 60"), options, 8),
      7);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 20s);
}

TEST(ProcessLauncher, ARankIgnoringSigtermIsKilled) {
  LocalLaunchOptions options;
  options.nproc = 2;
  options.kill_grace = 300ms;
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(launch_local_processes(
                sh("if [ $RANK = 0 ]; then sleep 0.2; exit 3; fi; trap '' TERM; sleep 60 & wait"),
                options, 8),
            3);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 20s);
}

TEST(ProcessLauncher, ARankKilledBySignalReportsIt) {
  LocalLaunchOptions options;
  options.nproc = 2;
  EXPECT_EQ(launch_local_processes(sh("if [ $RANK = 1 ]; then kill -9 $$; fi; exit 0"), options, 8),
            128 + 9);
}

TEST(ProcessLauncher, MissingExecutableFails) {
  LocalLaunchOptions options;
  options.nproc = 2;
  EXPECT_EQ(launch_local_processes({"/nonexistent/moegraph"}, options, 8), 127);
}

TEST(ProcessLauncher, NprocIsBounded) {
  LocalLaunchOptions options;
  options.nproc = 0;
  EXPECT_THROW(launch_local_processes(sh("true"), options, 8), Error);
  options.nproc = 9;
  EXPECT_THROW(launch_local_processes(sh("true"), options, 8), Error);
}

TEST(ProcessLauncher, TakesTheNprocFlagOut) {
  std::vector<std::string> args = {"moegraph", "run", "--nproc-per-node", "2", "--tp", "2"};
  EXPECT_EQ(take_nproc_per_node_flag(args, 8), 2);
  EXPECT_EQ(args, (std::vector<std::string>{"moegraph", "run", "--tp", "2"}));
  args = {"moegraph", "run", "--nproc-per-node=4"};
  EXPECT_EQ(take_nproc_per_node_flag(args, 8), 4);
  EXPECT_EQ(args, (std::vector<std::string>{"moegraph", "run"}));
  args = {"moegraph", "run"};
  EXPECT_EQ(take_nproc_per_node_flag(args, 8), std::nullopt);
}

TEST(ProcessLauncher, BadNprocFlagValues) {
  auto error = [](std::vector<std::string> args) {
    try {
      take_nproc_per_node_flag(args, 8);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_THAT(error({"run", "--nproc-per-node"}), HasSubstr("needs a value"));
  EXPECT_THAT(error({"run", "--nproc-per-node", "two"}), HasSubstr("'two' is not a whole number"));
  EXPECT_THAT(error({"run", "--nproc-per-node", "0"}), HasSubstr("0 is out of range [1, 8]"));
  EXPECT_THAT(error({"run", "--nproc-per-node=9"}), HasSubstr("9 is out of range"));
  EXPECT_THAT(error({"run", "--nproc-per-node=2", "--nproc-per-node", "2"}),
              HasSubstr("given twice"));
}

}  // namespace
}  // namespace mg
