// `--nproc-per-node N`: start N copies of a command on this host, one per GPU, with the
// environment torchrun would give them (RANK = LOCAL_RANK = 0..N-1, WORLD_SIZE =
// LOCAL_WORLD_SIZE = N, MASTER_ADDR = 127.0.0.1, MASTER_PORT a free port unless set), wait for
// them, and end them all as soon as one fails: a rank that dies leaves its peers waiting in a
// collective, so they are stopped (SIGTERM, then SIGKILL after a grace period) instead of left
// to their timeouts.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace mg {

struct LocalLaunchOptions {
  int nproc = 1;
  // MASTER_PORT for the children: the launcher's own MASTER_PORT when set, else a port the
  // kernel gives as free (0 here).
  int master_port = 0;
  // How long a child has to exit after SIGTERM before SIGKILL.
  std::chrono::milliseconds kill_grace = std::chrono::seconds(5);
};

// Runs `argv` (argv[0] an executable path) `nproc` times. Returns 0 when every process exited
// with 0; otherwise the status of the first one that failed (its exit code, or 128 + signal),
// after ending the others. NCCL_NVLS_ENABLE is set to 0 in the children unless set already
// (NVLink multicast can take a shared host's GPUs out of service). Throws mg::Error when nproc
// is out of [1, max_nproc] or a process cannot be started.
int launch_local_processes(const std::vector<std::string>& argv, const LocalLaunchOptions& options,
                           int max_nproc);

// Removes `--nproc-per-node N` or `--nproc-per-node=N` from `args` and returns N; nullopt when
// absent. Throws mg::Error when the value is missing, not a number, out of [1, max_nproc], or
// the flag is given twice.
std::optional<int> take_nproc_per_node_flag(std::vector<std::string>& args, int max_nproc);

}  // namespace mg
