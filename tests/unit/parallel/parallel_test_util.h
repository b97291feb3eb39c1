// Runs one function per rank on its own thread, the way multi-rank tests need it.
#pragma once

#include <exception>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "framework/parallel/local_communicator.h"

namespace mg::parallel_test {

// Calls fn(rank, comm) on `group.size()` threads and waits for all. If a rank throws, the
// group is aborted (so the others fail instead of waiting) and the first exception, in rank
// order, is rethrown.
inline void run_ranks(LocalCommGroup& group,
                      const std::function<void(int rank, Communicator& comm)>& fn) {
  std::vector<std::exception_ptr> errors(static_cast<size_t>(group.size()));
  std::vector<std::thread> threads;
  for (int r = 0; r < group.size(); ++r) {
    threads.emplace_back([&, r] {
      try {
        fn(r, group.communicator(r));
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = std::current_exception();
        group.abort(std::string("rank ") + std::to_string(r) + " failed: " + e.what());
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (const std::exception_ptr& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

}  // namespace mg::parallel_test
