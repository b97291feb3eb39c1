#include "serve/sequential_backend.h"

#include <algorithm>

#include "framework/core/error.h"

namespace mg::serve {

namespace {

// Thrown from the token callback to leave Session::generate when the request was cancelled.
struct Cancelled {};

}  // namespace

SequentialBackend::SequentialBackend(std::unique_ptr<Session> session, int max_waiting)
    : session_(std::move(session)), max_waiting_(max_waiting) {
  MG_ASSERT(session_ != nullptr, "no session");
  worker_ = std::thread([this] { worker_loop(); });
}

SequentialBackend::~SequentialBackend() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    if (running_) running_->cancelled = true;
  }
  wake_.notify_all();
  worker_.join();
  // Requests never started end as cancelled, as Engine's destructor ends them.
  for (const auto& r : waiting_) {
    if (r->options.on_event) r->options.on_event({r->id, -1, FinishReason::kCancelled, {}});
  }
}

RequestId SequentialBackend::add_request(std::vector<int32_t> prompt, RequestOptions options) {
  const ExecutionPlan& p = session_->plan();
  MG_CHECK(!prompt.empty(), "the prompt is empty");
  MG_CHECK(options.max_new_tokens >= 1, "max_new_tokens must be >= 1, got {}",
           options.max_new_tokens);
  MG_CHECK(static_cast<int64_t>(prompt.size()) + options.max_new_tokens <= p.max_seq_len,
           "prompt of {} tokens + {} new tokens exceeds the maximum sequence length {}",
           prompt.size(), options.max_new_tokens, p.max_seq_len);
  for (int32_t id : prompt) {
    MG_CHECK(id >= 0 && id < p.info.vocab_size(), "token id {} is outside the vocabulary of {}", id,
             p.info.vocab_size());
  }
  Sampler::validate(options.sampling);
  auto r = std::make_shared<Request>();
  r->prompt = std::move(prompt);
  r->options = std::move(options);
  {
    std::lock_guard lock(mutex_);
    MG_CHECK(static_cast<int>(waiting_.size()) < max_waiting_,
             "{} requests are already waiting; try again later", waiting_.size());
    r->id = next_id_++;
    waiting_.push_back(r);
  }
  wake_.notify_one();
  return r->id;
}

bool SequentialBackend::cancel(RequestId id) {
  std::shared_ptr<Request> dropped;
  {
    std::lock_guard lock(mutex_);
    if (running_ && running_->id == id) {
      running_->cancelled = true;
      return true;
    }
    auto it =
        std::find_if(waiting_.begin(), waiting_.end(), [id](const auto& r) { return r->id == id; });
    if (it == waiting_.end()) return false;
    dropped = *it;
    waiting_.erase(it);
  }
  if (dropped->options.on_event) {
    dropped->options.on_event({id, -1, FinishReason::kCancelled, {}});
  }
  return true;
}

EngineStats SequentialBackend::stats() const {
  std::lock_guard lock(mutex_);
  EngineStats s;
  s.slots_total = 1;
  s.running = running_ ? 1 : 0;
  s.slots_free = 1 - s.running;
  s.waiting = static_cast<int>(waiting_.size());
  s.steps = steps_;
  s.generated_tokens = generated_tokens_;
  s.prompt_tokens = prompt_tokens_;
  return s;
}

void SequentialBackend::worker_loop() {
  for (;;) {
    std::shared_ptr<Request> r;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [this] { return stopping_ || !waiting_.empty(); });
      if (stopping_) return;
      r = waiting_.front();
      waiting_.pop_front();
      running_ = r;
    }
    std::string error;
    const FinishReason finish = run(*r, error);
    {
      std::lock_guard lock(mutex_);
      running_.reset();
    }
    // The last event after the slot is free: a client that sees it finds the backend idle.
    if (r->options.on_event) r->options.on_event({r->id, -1, finish, error});
  }
}

FinishReason SequentialBackend::run(Request& r, std::string& error) {
  GenerateOptions gen;
  gen.max_new_tokens = r.options.max_new_tokens;
  gen.sampling = r.options.sampling;
  gen.seed = r.options.seed;
  gen.stop_at_eos = r.options.stop_at_eos;
  gen.stop_token_ids = r.options.stop_token_ids;
  gen.on_token = [this, &r](int32_t token) {
    {
      std::lock_guard lock(mutex_);
      if (r.cancelled) throw Cancelled{};
      ++generated_tokens_;
      ++steps_;
    }
    if (r.options.on_event) r.options.on_event({r.id, token, FinishReason::kNone, {}});
  };
  {
    std::lock_guard lock(mutex_);
    if (r.cancelled) return FinishReason::kCancelled;
    prompt_tokens_ += r.prompt.size();
  }
  try {
    const GenerateResult result = session_->generate(r.prompt, gen);
    const int32_t last = result.tokens.empty() ? -1 : result.tokens.back();
    const int64_t eos = session_->plan().info.eos_token_id();
    const bool stopped =
        r.options.stop_at_eos && last >= 0 &&
        ((eos >= 0 && last == eos) ||
         std::find(r.options.stop_token_ids.begin(), r.options.stop_token_ids.end(), last) !=
             r.options.stop_token_ids.end());
    return stopped ? FinishReason::kStop : FinishReason::kLength;
  } catch (const Cancelled&) {
    return FinishReason::kCancelled;
  } catch (const std::exception& e) {
    error = e.what();
    return FinishReason::kError;
  }
}

}  // namespace mg::serve
