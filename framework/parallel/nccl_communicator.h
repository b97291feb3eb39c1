// The Communicator of one process per GPU: NCCL collectives enqueued on CUDA streams.
//
//   std::unique_ptr<Communicator> comm =
//       make_nccl_communicator(*LaunchEnv::from_environment(kMaxRanks), device, fingerprint,
//                              timeout);
//
// Bootstrap: rank 0 makes the NCCL unique id and hands it to every rank through the TCP store
// (framework/parallel/tcp_store.h), which also checks that every rank runs the same model and
// layout (`fingerprint`). Every NCCL communicator is non-blocking (ncclConfig_t::blocking = 0):
// each call is followed by polling ncclCommGetAsyncError until it is done or `timeout` passed,
// so initialisation or connection set-up with a dead peer ends in an error instead of a hang.
// A watchdog thread per communicator follows the collectives on the GPU (an event after each):
// one that stays unfinished for `timeout`, or an asynchronous NCCL error, aborts the
// communicator (ncclCommAbort, which also ends its kernels, so a host waiting on the stream
// returns) and every later call throws mg::Error saying which collective timed out and NCCL's
// last error. Errors of NCCL calls (ncclResult_t) become mg::Error naming the call.
//
// Buffers: device memory of the process's GPU. Host buffers (the MoE runner's token counts) are
// staged through a device buffer and the call waits for them, so it returns with the result in
// host memory; that cannot be captured in a CUDA graph (mg::Error if tried). A null stream means
// the communicator's own stream, and the call returns once the collective is done.
//
// Determinism (what Communicator promises, and what NCCL gives): NCCL's documentation promises
// no bit-identical results, but in the ring and tree algorithms it picks here (NVLink SHARP,
// NCCL_NVLS_ENABLE, stays off on shared machines) each element of an all-reduce is reduced once
// and the result is copied to every rank, so every rank gets the same bits in one run.
// reduce_scatter(v) gives each block to one rank only. What is NOT promised: the order of the
// additions is NCCL's (ring or tree order, chunked by channel), not rank order 0, 1, ..., so
// the bits differ from LocalCommunicator's and may change with the message size, the GPU
// count, the topology, NCCL_ALGO / NCCL_PROTO / the channel count and the NCCL version; BF16 and
// F16 sums round at every step. Results are repeatable run to run on the same machine and
// configuration. Gathers and all-to-all move bytes and are exact.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "framework/parallel/communicator.h"
#include "framework/parallel/launch_env.h"

namespace mg {

// Whether this build links NCCL (CMake found nccl.h and libnccl next to the CUDA toolkit).
bool built_with_nccl();

// The communicator of all `env.world_size` processes, on GPU `device` (made current). Collective
// over every rank: each calls it once at startup with its own env. Throws mg::Error when the
// build has no NCCL, the store exchange fails or times out, the fingerprints differ, or NCCL's
// initialisation fails or does not finish within `timeout`.
std::unique_ptr<Communicator> make_nccl_communicator(const LaunchEnv& env, int device,
                                                     const std::string& fingerprint,
                                                     std::chrono::milliseconds timeout);

}  // namespace mg
