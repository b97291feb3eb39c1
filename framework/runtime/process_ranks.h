// Multi-rank runs with one process per GPU: this process is one rank of a run launched with
// torchrun-style environment variables (framework/parallel/launch_env.h), by torchrun itself or
// `moegraph --nproc-per-node N`. The ranks talk through NCCL (NcclCommunicator); the parallel
// layout is the same ParallelConfig the CPU thread ranks use (framework/runtime/local_ranks.h).
#pragma once

#include <filesystem>
#include <functional>
#include <string>

#include "framework/parallel/launch_env.h"
#include "framework/runtime/local_ranks.h"

namespace mg {

// How long the ranks wait for each other (startup, and a collective on the GPU) unless
// MG_DIST_TIMEOUT_S says otherwise.
inline constexpr std::chrono::seconds kDefaultDistTimeout{300};

// Runs this process's rank: checks that tp x dp equals WORLD_SIZE, puts the rank on GPU
// cuda:LOCAL_RANK, connects the ranks (the store compares every rank's fingerprint: the model
// file's name and size, the layout, and `run_fingerprint`, which should hold whatever must be the
// same on every rank for the collectives to match, such as the number of steps), compiles the
// graph for this rank's ParallelConfig, opens a Session on the communicator and calls
// fn(config, session). A barrier at the end makes a failure of any rank an error here too.
// Throws mg::Error for a device that is not CUDA, a build without NCCL, a layout that does not
// match WORLD_SIZE, a mismatched rank or a timeout.
void run_process_rank(const std::filesystem::path& graph_file, CompileOptions compile,
                      const SessionOptions& session, const LocalRanksOptions& ranks,
                      const LaunchEnv& env, const std::string& run_fingerprint,
                      const std::function<void(const ParallelConfig&, Session&)>& fn);

}  // namespace mg
