// Runs the moegraph binary as a user would, capturing exit code, stdout and stderr.
#pragma once

#include <string>
#include <vector>

namespace mg::testing {

struct CommandResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

// Runs MG_MOEGRAPH_EXE with `args` (each argument is shell-quoted).
CommandResult run_moegraph(const std::vector<std::string>& args);

}  // namespace mg::testing
