// Where this process sits in a multi-process run, from the environment a launcher sets: the
// variables of torchrun (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR,
// MASTER_PORT), which `moegraph --nproc-per-node N` sets too.
//
//   std::optional<LaunchEnv> env = LaunchEnv::from_environment();
//   if (env) { ... one process of env->world_size ... }
//
// Every value is checked (a number, in range) and a bad one is an mg::Error naming the variable,
// its value and what was expected: a typo in a launch script fails at once instead of hanging
// while the ranks wait for a peer that will never come.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>

namespace mg {

// The port the store listens on when MASTER_PORT is not set (torchrun's default).
inline constexpr int kDefaultMasterPort = 29500;
// Longest MASTER_ADDR accepted (a DNS name is at most 253 characters).
inline constexpr size_t kMaxMasterAddrLength = 253;

struct LaunchEnv {
  int rank = 0;
  int world_size = 1;
  // Index of this process among those of its host: its GPU is cuda:local_rank.
  int local_rank = 0;
  int local_world_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = kDefaultMasterPort;

  // Parses the variables through `getenv` (returns null for a variable that is not set).
  // Returns nullopt when neither RANK nor WORLD_SIZE is set (not launched as one of several
  // processes); throws mg::Error when one is set without the other, a value is not a number or
  // out of range (0 <= RANK < WORLD_SIZE <= `max_world`, 0 <= LOCAL_RANK < LOCAL_WORLD_SIZE,
  // 1 <= MASTER_PORT <= 65535), or MASTER_ADDR is empty or too long. MASTER_ADDR and
  // MASTER_PORT are required when WORLD_SIZE > 1; LOCAL_RANK defaults to RANK and
  // LOCAL_WORLD_SIZE to WORLD_SIZE.
  static std::optional<LaunchEnv> parse(const std::function<const char*(const char*)>& getenv,
                                        int max_world);
  // parse() on this process's environment.
  static std::optional<LaunchEnv> from_environment(int max_world);

  // "rank 1 of 4 (local 1 of 4), store 127.0.0.1:29500"
  std::string str() const;
};

// How long the ranks wait for each other at startup (the store exchange and NCCL's init), and
// how long a collective may stay unfinished before the run is aborted: MG_DIST_TIMEOUT_S
// (seconds, 1 to 86400), default `fallback`.
std::chrono::milliseconds dist_timeout_from_environment(std::chrono::milliseconds fallback);

}  // namespace mg
