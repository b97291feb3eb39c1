#include "framework/core/thread_pool.h"

#include <algorithm>
#include <system_error>

#include "framework/core/error.h"

namespace mg {

int max_threads() {
  return std::max(64, 4 * static_cast<int>(std::thread::hardware_concurrency()));
}

std::thread start_thread(std::function<void()> fn, std::string_view what) {
  try {
    return std::thread(std::move(fn));
  } catch (const std::system_error& e) {
    MG_FAIL("{}: the system refused a new thread ({}); use fewer threads or ranks", what, e.what());
  }
}

ThreadPool::ThreadPool(int num_threads) {
  if (num_threads <= 0)
    num_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  MG_CHECK(num_threads <= max_threads(),
           "threads (--threads): {} is more than {} (4 per hardware thread of this machine, at "
           "least 64)",
           num_threads, max_threads());
  try {
    for (int i = 1; i < num_threads; ++i) {
      workers_.push_back(start_thread([this, i] { worker_loop(i); },
                                      fmt::format("thread pool: worker {} of {}", i, num_threads)));
    }
  } catch (...) {
    stop_workers();  // the destructor does not run for a constructor that throws
    throw;
  }
}

ThreadPool::~ThreadPool() {
  stop_workers();
}

void ThreadPool::stop_workers() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  work_cv_.notify_all();
  for (std::thread& t : workers_) t.join();
  workers_.clear();
}

// Takes chunks until none are left. Chunk claiming happens under the mutex: chunks are coarse
// (at most a few per thread), so contention is negligible next to the work.
void ThreadPool::run_chunks(int64_t n, int64_t chunk, FunctionRef<void(int64_t, int64_t)>* fn) {
  for (;;) {
    int64_t begin;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      begin = next_chunk_;
      if (begin >= n) return;
      next_chunk_ = begin + chunk;
    }
    (*fn)(begin, std::min(n, begin + chunk));
  }
}

void ThreadPool::worker_loop(int /*worker_index*/) {
  uint64_t seen = 0;
  for (;;) {
    FunctionRef<void(int64_t, int64_t)>* fn;
    int64_t n, chunk;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      work_cv_.wait(lock, [&] { return stopping_ || generation_ != seen; });
      if (stopping_) return;
      seen = generation_;
      fn = job_;
      n = job_n_;
      chunk = job_chunk_;
    }
    run_chunks(n, chunk, fn);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (--pending_workers_ == 0) done_cv_.notify_one();
    }
  }
}

void ThreadPool::parallel_for(int64_t n, FunctionRef<void(int64_t, int64_t)> fn, int64_t grain) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  const int64_t max_chunks = static_cast<int64_t>(size()) * 4;
  const int64_t chunk = std::max(grain, (n + max_chunks - 1) / max_chunks);
  if (workers_.empty() || chunk >= n) {
    fn(0, n);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    job_ = &fn;
    job_n_ = n;
    job_chunk_ = chunk;
    next_chunk_ = 0;
    pending_workers_ = static_cast<int>(workers_.size());
    ++generation_;
  }
  work_cv_.notify_all();
  run_chunks(n, chunk, &fn);
  std::unique_lock<std::mutex> lock(mutex_);
  done_cv_.wait(lock, [&] { return pending_workers_ == 0; });
  job_ = nullptr;
}

}  // namespace mg
