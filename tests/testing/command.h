// Runs the moegraph binary as a user would, capturing exit code, stdout and stderr.
//
// Every run is fenced so that a regression fails its test instead of eating the machine
// (issue 18): an address-space limit (RLIMIT_AS), a thread limit, and a wall-clock limit. A run
// that hits one is killed and reported through CommandResult::killed_by.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace mg::testing {

struct CommandLimits {
  // RLIMIT_AS of the child. Not applied to runs that touch a GPU (see command.cc).
  uint64_t address_space_bytes = uint64_t{8} << 30;
  // Threads of the child at any time; checked by polling /proc (RLIMIT_NPROC counts every
  // process of the user, and root is exempt from it).
  int max_threads = 256;
  // Wall-clock seconds before the child is killed.
  int timeout_seconds = 600;
};

struct CommandResult {
  int exit_code = -1;  // 128 + signal when killed
  std::string out;
  std::string err;
  // Empty, or why the harness killed the run ("timeout after 30 s", "more than 256 threads").
  std::string killed_by;
};

// Environment changes for one run: a value sets the variable, nullopt removes it.
using EnvChanges = std::map<std::string, std::optional<std::string>>;

// Runs MG_MOEGRAPH_EXE with `args` (passed as they are, no shell) under `limits`; stdin is
// /dev/null.
CommandResult run_moegraph(const std::vector<std::string>& args, const CommandLimits& limits = {},
                           const EnvChanges& env = {});

// The same with `input` (when set) on stdin.
CommandResult run_moegraph_with_input(const std::vector<std::string>& args,
                                      const std::optional<std::string>& input,
                                      const CommandLimits& limits = {}, const EnvChanges& env = {});

}  // namespace mg::testing
