// GenerationBackend that generates one request at a time with Session::generate on a worker
// thread; the others wait in a FIFO. Correct and simple, not fast: the first backend of the
// server, used until the batching Engine is available (and as the reference for it).
#pragma once

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "framework/runtime/session.h"
#include "serve/generation_backend.h"

namespace mg::serve {

class SequentialBackend : public GenerationBackend {
 public:
  explicit SequentialBackend(std::unique_ptr<Session> session, int max_waiting = 4096);
  ~SequentialBackend() override;  // cancels what is left, joins the worker

  RequestId add_request(std::vector<int32_t> prompt, RequestOptions options) override;
  bool cancel(RequestId id) override;
  EngineStats stats() const override;
  const ExecutionPlan& plan() const override { return session_->plan(); }
  std::string describe() const override { return "sequential (one sequence at a time)"; }

 private:
  struct Request {
    RequestId id;
    std::vector<int32_t> prompt;
    RequestOptions options;
    bool cancelled = false;  // under mutex_
  };
  void worker_loop();
  // Generates `r` on the worker thread; returns how it ended (kError: the message in `error`).
  FinishReason run(Request& r, std::string& error);

  std::unique_ptr<Session> session_;
  int max_waiting_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::shared_ptr<Request>> waiting_;
  std::shared_ptr<Request> running_;
  RequestId next_id_ = 1;
  bool stopping_ = false;
  uint64_t generated_tokens_ = 0;
  uint64_t prompt_tokens_ = 0;
  uint64_t steps_ = 0;
  std::thread worker_;
};

}  // namespace mg::serve
