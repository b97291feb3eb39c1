// The startup exchange of a multi-process run over TCP: rank 0 listens on MASTER_ADDR:MASTER_PORT,
// every other rank connects (retrying while rank 0 is not up yet), sends its rank and a
// fingerprint of what it is about to run, and receives rank 0's payload (the NCCL unique id).
//
//   std::string id = store_exchange(env, fingerprint, rank0_id_or_empty, timeout);
//
// It is a one-shot broadcast with a check, not a key-value store: that is all the bootstrap of
// NCCL needs (NCCL then makes its own connections). Rank 0 compares each fingerprint with its
// own, so ranks started with a different model or layout fail at startup with an error naming
// the rank and both fingerprints, instead of running mismatched collectives.
//
// Bounded: messages are at most kMaxStoreMessage bytes, every wait ends at the deadline. A rank
// that never arrives makes rank 0 fail with the ranks missing (and tell the ranks that came);
// rank 0 missing makes the others fail naming the address they tried. Connections that do not
// speak this protocol (a port scanner) are closed and ignored.
#pragma once

#include <chrono>
#include <string>

#include "framework/parallel/launch_env.h"

namespace mg {

inline constexpr size_t kMaxStoreMessage = 64 * 1024;

// Returns rank 0's `payload` on every rank (rank 0 gets its own back). `fingerprint` and
// `payload` must each be at most kMaxStoreMessage - 64 bytes. Throws mg::Error on a timeout, a
// fingerprint mismatch, a socket error or a malformed reply. With world_size 1 it returns
// `payload` at once, opening no socket.
std::string store_exchange(const LaunchEnv& env, const std::string& fingerprint,
                           const std::string& payload, std::chrono::milliseconds timeout);

}  // namespace mg
