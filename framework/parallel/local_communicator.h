// Ranks as threads of one process: a Communicator for CPU tests of data/expert/tensor-parallel
// logic without GPUs or other processes.
//
//   LocalCommGroup group(4);
//   // on the thread of rank r:
//   Communicator& comm = group.communicator(r);
//
// A collective publishes each rank's buffers, waits for every rank, lets each rank read what it
// needs (reductions add in rank order 0, 1, ..., so every rank gets the same bits whatever the
// timing) and waits again before anyone reuses a buffer. Ranks that call different collectives
// or sizes get an mg::Error naming both calls; a rank that never arrives makes the others fail
// after the group's timeout instead of hanging; abort() fails every waiting rank at once, in
// this group and every sub-group, including those made after the abort.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "framework/parallel/communicator.h"

namespace mg {

class LocalCommunicator;

class LocalCommGroup {
 public:
  explicit LocalCommGroup(int size, std::chrono::milliseconds timeout = std::chrono::seconds(60));
  ~LocalCommGroup();
  LocalCommGroup(const LocalCommGroup&) = delete;
  LocalCommGroup& operator=(const LocalCommGroup&) = delete;

  int size() const;
  // The communicator of `rank`, used by that rank's thread only.
  Communicator& communicator(int rank);
  // Every collective waiting now or called later throws mg::Error with `why`, in this group and
  // in every sub-group made from it, before or after the abort.
  void abort(const std::string& why);

  struct State;

 private:
  std::shared_ptr<State> state_;
  std::vector<std::unique_ptr<LocalCommunicator>> comms_;
};

}  // namespace mg
