#include "tests/testing/command.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "tests/testing/test_util.h"

namespace mg::testing {

namespace {

std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A CUDA context reserves far more address space than it uses (the driver maps the GPU's memory
// and a unified address range, tens to hundreds of GiB of virtual memory), so an RLIMIT_AS that
// fences a CPU run would fail cuInit. Runs that may create one get no address-space limit; they
// run on the GPU machine, where the thread and time limits still apply.
bool may_use_gpu(const std::vector<std::string>& args) {
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--device" && i + 1 < args.size() && args[i + 1].starts_with("cuda")) {
      return true;
    }
    if (args[i].starts_with("--device=cuda")) return true;
    if (args[i] == "bench" && i + 1 < args.size() && args[i + 1] != "plot") return true;
  }
  return false;
}

// AddressSanitizer reserves terabytes of shadow address space at start (and the moegraph binary
// is built with the same sanitizers as this harness): under an RLIMIT_AS it could not start.
// Sanitized builds rely on ASan's own allocator limits instead (tools/sanitize.sh).
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kAddressSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kAddressSanitizer = true;
#else
constexpr bool kAddressSanitizer = false;
#endif
#else
constexpr bool kAddressSanitizer = false;
#endif

// Threads of process `pid` (the Threads: line of /proc/PID/status); -1 when it is gone.
int thread_count(pid_t pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.starts_with("Threads:")) return std::atoi(line.c_str() + 8);
  }
  return -1;
}

[[noreturn]] void exec_child(const std::vector<std::string>& args, const CommandLimits& limits,
                             const EnvChanges& env, const std::filesystem::path& dir,
                             bool limit_address_space, bool has_input) {
  // After fork() in a process that may have threads, only async-signal-safe calls are strictly
  // allowed; glibc's fork() leaves malloc usable in the child, which the paths and setenv below
  // need, and everything else is a plain system call. A failure exits 125 (127: exec failed).
  const int out = open((dir / "out").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  const int err = open((dir / "err").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (out < 0 || err < 0 || dup2(out, 1) < 0 || dup2(err, 2) < 0) _exit(125);
  // stdin: the run's input, or /dev/null (never the test runner's own stdin).
  const int in = open(has_input ? (dir / "in").c_str() : "/dev/null", O_RDONLY);
  if (in < 0 || dup2(in, 0) < 0) _exit(125);
  setpgid(0, 0);  // its own process group, so a kill reaches anything it started
  if (limit_address_space) {
    const rlimit as{limits.address_space_bytes, limits.address_space_bytes};
    if (setrlimit(RLIMIT_AS, &as) != 0) _exit(125);
  }
  // Effective for non-root users only (root is exempt); the /proc watch covers root too.
  const rlimit nproc{static_cast<rlim_t>(limits.max_threads) * 16,
                     static_cast<rlim_t>(limits.max_threads) * 16};
  setrlimit(RLIMIT_NPROC, &nproc);
  for (const auto& [name, value] : env) {
    if (value) {
      setenv(name.c_str(), value->c_str(), 1);
    } else {
      unsetenv(name.c_str());
    }
  }
  std::vector<char*> argv;
  static std::string exe = MG_MOEGRAPH_EXE;
  argv.push_back(exe.data());
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  execv(exe.c_str(), argv.data());
  _exit(127);
}

}  // namespace

CommandResult run_moegraph(const std::vector<std::string>& args, const CommandLimits& limits,
                           const EnvChanges& env) {
  return run_moegraph_with_input(args, std::nullopt, limits, env);
}

CommandResult run_moegraph_with_input(const std::vector<std::string>& args,
                                      const std::optional<std::string>& input,
                                      const CommandLimits& limits, const EnvChanges& env) {
  const auto dir = temp_dir("command");
  if (input) {
    std::ofstream in(dir / "in", std::ios::binary);
    in << *input;
    if (!in.good()) return CommandResult{-1, "", "cannot write the input", "cannot write input"};
  }
  const bool limit_address_space = !may_use_gpu(args) && !kAddressSanitizer;
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid < 0) return CommandResult{-1, "", "fork failed", "fork failed"};
  if (pid == 0) exec_child(args, limits, env, dir, limit_address_space, input.has_value());

  CommandResult r;
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(limits.timeout_seconds);
  int status = 0;
  for (int polls = 0;; ++polls) {
    const pid_t done = waitpid(pid, &status, WNOHANG);
    if (done == pid) break;
    if (r.killed_by.empty()) {
      const int threads = thread_count(pid);
      if (threads > limits.max_threads) {
        r.killed_by = "more than " + std::to_string(limits.max_threads) + " threads";
      } else if (std::chrono::steady_clock::now() > deadline) {
        r.killed_by = "timeout after " + std::to_string(limits.timeout_seconds) + " s";
      }
      if (!r.killed_by.empty()) kill(-pid, SIGKILL);
    }
    // Poll fast at first (most runs take milliseconds), then every 20 ms.
    std::this_thread::sleep_for(std::chrono::milliseconds(polls < 50 ? 2 : 20));
  }
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = slurp(dir / "out");
  r.err = slurp(dir / "err");
  if (!r.killed_by.empty()) r.err += "[test harness: killed, " + r.killed_by + "]\n";
  return r;
}

}  // namespace mg::testing
