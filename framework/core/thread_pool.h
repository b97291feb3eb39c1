// A fixed pool of worker threads for CPU kernels.
//
// parallel_for splits [0, n) into contiguous chunks of at least `grain` items; the calling thread
// takes part, so a pool of size 1 runs everything inline. Calls do not allocate.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string_view>
#include <thread>
#include <vector>

#include "framework/core/function_ref.h"

namespace mg {

// The most threads one pool (--threads) may have: 4 per hardware thread, and at least 64 (so
// tests that ask for a few threads pass on a one-core machine). More only adds contention; the
// bound keeps a typo like --threads 100000 from filling the process table.
int max_threads();

// Starts a std::thread running `fn`, turning the system's refusal (std::system_error, e.g. the
// process table is full) into mg::Error naming `what` and the hint to lower it.
std::thread start_thread(std::function<void()> fn, std::string_view what);

class ThreadPool {
 public:
  // `num_threads` counts the caller; 0 means std::thread::hardware_concurrency(). Throws
  // mg::Error when it is above max_threads(), or when the system refuses a thread (the workers
  // already started are stopped first).
  explicit ThreadPool(int num_threads = 1);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  // Calls fn(begin, end) over disjoint chunks covering [0, n); returns when all are done.
  // Must not be called from inside another parallel_for of the same pool.
  void parallel_for(int64_t n, FunctionRef<void(int64_t, int64_t)> fn, int64_t grain = 1);

 private:
  void worker_loop(int worker_index);
  void stop_workers();
  void run_chunks(int64_t n, int64_t chunk, FunctionRef<void(int64_t, int64_t)>* fn);

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable work_cv_;
  std::condition_variable done_cv_;
  uint64_t generation_ = 0;
  bool stopping_ = false;
  // Current job (valid while pending_ > 0).
  FunctionRef<void(int64_t, int64_t)>* job_ = nullptr;
  int64_t job_n_ = 0;
  int64_t job_chunk_ = 0;
  int64_t next_chunk_ = 0;
  int pending_workers_ = 0;
};

}  // namespace mg
