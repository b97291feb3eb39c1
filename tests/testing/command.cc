#include "tests/testing/command.h"

#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "tests/testing/test_util.h"

namespace mg::testing {

namespace {
std::string quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) {
    if (c == '\'') {
      q += "'\\''";
    } else {
      q += c;
    }
  }
  return q + "'";
}

std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}
}  // namespace

CommandResult run_moegraph(const std::vector<std::string>& args) {
  const auto dir = temp_dir("command");
  std::string cmd = quote(MG_MOEGRAPH_EXE);
  for (const std::string& a : args) cmd += " " + quote(a);
  cmd += " >" + quote((dir / "out").string()) + " 2>" + quote((dir / "err").string());
  const int status = std::system(cmd.c_str());
  CommandResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = slurp(dir / "out");
  r.err = slurp(dir / "err");
  return r;
}

}  // namespace mg::testing
