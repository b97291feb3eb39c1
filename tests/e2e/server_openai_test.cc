// `moegraph serve` against real clients: the bundled model served on a free loopback port, and
// tests/e2e/openai_client_check.py (the `openai` Python package) running completions, chat,
// streaming, errors, 32 concurrent streaming clients and a client that disconnects mid-stream
// (its sequence must be freed). Skipped, saying why, where python3 or the package is missing
// (`pip install openai`; $MG_PYTHON picks the interpreter). Beside it, what needs no Python: the
// startup errors of `serve`.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "serve/http_server.h"
#include "tests/testing/command.h"

namespace mg {
namespace {

using ::testing::HasSubstr;

const std::filesystem::path kSource(MG_SOURCE_DIR);

std::string python() {
  const char* env = std::getenv("MG_PYTHON");
  return env != nullptr && *env != '\0' ? env : "python3";
}

// A `moegraph serve --port 0` child; the port comes from its "listening on" line.
class ServerProcess {
 public:
  explicit ServerProcess(const std::vector<std::string>& extra_args) {
    int out[2];
    if (pipe(out) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      dup2(out[1], STDOUT_FILENO);
      close(out[0]);
      close(out[1]);
      std::vector<std::string> args = {MG_MOEGRAPH_EXE, "serve", "--port", "0", "--threads", "2"};
      args.insert(args.end(), extra_args.begin(), extra_args.end());
      std::vector<char*> argv;
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
    close(out[1]);
    // Read the startup lines (model loading takes a moment) up to "listening on".
    std::string seen;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    char buf[256];
    while (std::chrono::steady_clock::now() < deadline) {
      const ssize_t n = read(out[0], buf, sizeof(buf));
      if (n <= 0) break;
      seen.append(buf, static_cast<size_t>(n));
      const size_t at = seen.find("listening on http://127.0.0.1:");
      if (at != std::string::npos && seen.find('\n', at) != std::string::npos) {
        port_ = std::atoi(seen.c_str() + at + std::string("listening on http://127.0.0.1:").size());
        break;
      }
    }
    startup_ = seen;
    close(out[0]);
  }
  ~ServerProcess() { stop(); }

  // SIGTERM, then the exit status (128 + signal when it had to be killed).
  int stop() {
    if (pid_ <= 0) return exit_code_;
    kill(pid_, SIGTERM);
    for (int i = 0; i < 300; ++i) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        pid_ = -1;
        return exit_code_;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
    exit_code_ = 128 + SIGKILL;
    return exit_code_;
  }

  int port() const { return port_; }
  const std::string& startup() const { return startup_; }

 private:
  pid_t pid_ = -1;
  int port_ = 0;
  int exit_code_ = -1;
  std::string startup_;
};

// Runs openai_client_check.py against a server started with `args`.
void check_with_openai_client(const std::vector<std::string>& args) {
  if (!serve::http_server_available()) {
    GTEST_SKIP() << "this build has no cpp-httplib (libcpp-httplib-dev), so `moegraph serve` "
                    "cannot serve";
  }
  if (std::system((python() + " -c 'import openai' >/dev/null 2>&1").c_str()) != 0) {
    GTEST_SKIP() << python()
                 << " with the 'openai' package is not available (pip install openai, or set "
                    "MG_PYTHON to an interpreter that has it)";
  }
  ServerProcess server(args);
  ASSERT_GT(server.port(), 0) << "no 'listening on' line; the server printed:\n"
                              << server.startup();
  EXPECT_THAT(server.startup(), HasSubstr("chat template:"));
  const std::string check = (kSource / "tests" / "e2e" / "openai_client_check.py").string();
  const std::string cmd =
      python() + " " + check + " http://127.0.0.1:" + std::to_string(server.port()) + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string output;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof(buf), p)) output.append(buf, n);
  const int status = pclose(p);
  EXPECT_EQ(status, 0) << output;
  EXPECT_THAT(output, HasSubstr("checks passed")) << output;
  // SIGTERM stops the server cleanly.
  EXPECT_EQ(server.stop(), 0);
}

// The batching engine, 8 sequences at once (the 32 clients queue); a long context, so the
// disconnecting client leaves while its sequence still generates.
TEST(ServerOpenAi, RealClientAgainstTheBatchingEngine) {
  check_with_openai_client({"--max-seq-len", "16384", "--max-sequences", "8"});
}

// One request at a time on a plain session: the same answers.
TEST(ServerOpenAi, RealClientAgainstTheSequentialBackend) {
  check_with_openai_client({"--max-seq-len", "16384", "--sequential"});
}

TEST(ServerOpenAi, StartupErrorsAreOneLine) {
  const std::string bad_template =
      (std::filesystem::temp_directory_path() / "mg_server_bad_template.jinja").string();
  {
    FILE* f = std::fopen(bad_template.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs("{% for m in messages %}{{ m.content | wordwrap }}{% endfor %}", f);
    std::fclose(f);
  }
  const testing::CommandResult r =
      testing::run_moegraph({"serve", "--port", "0", "--chat-template", bad_template});
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_THAT(r.err, HasSubstr("the filter 'wordwrap' is not supported"));
  std::remove(bad_template.c_str());
  const testing::CommandResult port = testing::run_moegraph({"serve", "--port", "70000"});
  EXPECT_EQ(port.exit_code, 2) << port.err;
  EXPECT_THAT(port.err, HasSubstr("--port"));
}

}  // namespace
}  // namespace mg
