#include "framework/parallel/process_launcher.h"

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <thread>

#include "framework/core/error.h"

extern char** environ;

namespace mg {

namespace {

using Clock = std::chrono::steady_clock;

// A TCP port on 127.0.0.1 that was free a moment ago (the kernel's pick for port 0).
int free_local_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  MG_CHECK(fd >= 0, "--nproc-per-node: cannot open a socket: {}", std::strerror(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
  const int err = errno;
  ::close(fd);
  MG_CHECK(ok, "--nproc-per-node: cannot find a free port: {}", std::strerror(err));
  return ntohs(addr.sin_port);
}

int exit_status(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

// SIGTERM to every running child, SIGKILL to those still there after `grace`; reaps them all.
void end_all(std::map<pid_t, int>& running, std::chrono::milliseconds grace) {
  for (const auto& [pid, rank] : running) ::kill(pid, SIGTERM);
  const Clock::time_point deadline = Clock::now() + grace;
  while (!running.empty()) {
    for (auto it = running.begin(); it != running.end();) {
      int status = 0;
      if (::waitpid(it->first, &status, WNOHANG) == it->first) {
        it = running.erase(it);
      } else {
        ++it;
      }
    }
    if (running.empty()) break;
    if (Clock::now() >= deadline) {
      for (const auto& [pid, rank] : running) ::kill(pid, SIGKILL);
      for (const auto& [pid, rank] : running) ::waitpid(pid, nullptr, 0);
      running.clear();
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace

int launch_local_processes(const std::vector<std::string>& argv, const LocalLaunchOptions& options,
                           int max_nproc) {
  MG_CHECK(options.nproc >= 1 && options.nproc <= max_nproc,
           "--nproc-per-node must be in [1, {}], got {}", max_nproc, options.nproc);
  MG_CHECK(!argv.empty(), "--nproc-per-node: no command to start");
  int port = options.master_port;
  if (port == 0) {
    const char* env_port = std::getenv("MASTER_PORT");
    port = env_port != nullptr ? std::atoi(env_port) : free_local_port();
    MG_CHECK(port >= 1 && port <= 65535, "environment variable MASTER_PORT='{}' is not a port",
             env_port ? env_port : "");
  }

  // Everything exec needs is built before fork: the child only calls execve.
  const std::vector<std::string> overridden = {
      "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"};
  std::vector<std::string> base;
  bool has_nvls = false;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string_view var(*e);
    const std::string_view name = var.substr(0, var.find('='));
    if (name == "NCCL_NVLS_ENABLE") has_nvls = true;
    bool skip = false;
    for (const std::string& o : overridden) skip = skip || name == o;
    if (!skip) base.emplace_back(var);
  }
  if (!has_nvls) base.emplace_back("NCCL_NVLS_ENABLE=0");
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);

  std::map<pid_t, int> running;  // pid -> rank
  for (int rank = 0; rank < options.nproc; ++rank) {
    std::vector<std::string> env = base;
    env.push_back(fmt::format("RANK={}", rank));
    env.push_back(fmt::format("LOCAL_RANK={}", rank));
    env.push_back(fmt::format("WORLD_SIZE={}", options.nproc));
    env.push_back(fmt::format("LOCAL_WORLD_SIZE={}", options.nproc));
    env.push_back("MASTER_ADDR=127.0.0.1");
    env.push_back(fmt::format("MASTER_PORT={}", port));
    std::vector<char*> envp;
    for (std::string& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::execve(args[0], args.data(), envp.data());
      // Only async-signal-safe calls here.
      const char msg[] = "moegraph: error: --nproc-per-node: cannot start the rank process\n";
      [[maybe_unused]] const ssize_t n = ::write(2, msg, sizeof(msg) - 1);
      ::_exit(127);
    }
    if (pid < 0) {
      const int err = errno;
      end_all(running, options.kill_grace);
      MG_FAIL("--nproc-per-node: cannot start rank {}: {}", rank, std::strerror(err));
    }
    running.emplace(pid, rank);
  }

  // Polls our own children only: waitpid(-1) would also reap processes other code started.
  while (!running.empty()) {
    for (auto it = running.begin(); it != running.end();) {
      int status = 0;
      const pid_t pid = ::waitpid(it->first, &status, WNOHANG);
      if (pid == 0 || (pid < 0 && errno == EINTR)) {
        ++it;
        continue;
      }
      const int rank = it->second;
      it = running.erase(it);
      const int code = pid < 0 ? 1 : exit_status(status);
      if (code != 0) {
        std::fprintf(stderr,
                     "moegraph: error: --nproc-per-node: rank %d exited with status %d; stopping "
                     "the other %zu rank(s)\n",
                     rank, code, running.size());
        end_all(running, options.kill_grace);
        return code;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return 0;
}

std::optional<int> take_nproc_per_node_flag(std::vector<std::string>& args, int max_nproc) {
  constexpr std::string_view kFlag = "--nproc-per-node";
  std::optional<int> result;
  for (size_t i = 0; i < args.size();) {
    std::string value;
    size_t remove = 0;
    if (args[i] == kFlag) {
      MG_CHECK(i + 1 < args.size(), "{} needs a value (the number of processes)", kFlag);
      value = args[i + 1];
      remove = 2;
    } else if (args[i].starts_with(std::string(kFlag) + "=")) {
      value = args[i].substr(kFlag.size() + 1);
      remove = 1;
    } else {
      ++i;
      continue;
    }
    MG_CHECK(!result, "{} is given twice", kFlag);
    int n = 0;
    const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
    MG_CHECK(!value.empty() && ec == std::errc() && end == value.data() + value.size(),
             "{}: '{}' is not a whole number", kFlag, value);
    MG_CHECK(n >= 1 && n <= max_nproc, "{}: {} is out of range [1, {}]", kFlag, n, max_nproc);
    result = n;
    args.erase(args.begin() + static_cast<std::ptrdiff_t>(i),
               args.begin() + static_cast<std::ptrdiff_t>(i + remove));
  }
  return result;
}

}  // namespace mg
