#include "framework/runtime/engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>

#include "framework/core/error.h"
#include "framework/core/finite.h"
#include "framework/core/logging.h"
#include "framework/runtime/kv_block_pool.h"

namespace mg {

const char* finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::kNone:
      return "none";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kCancelled:
      return "cancelled";
    case FinishReason::kError:
      return "error";
  }
  return "unknown";
}

namespace {

using Clock = std::chrono::steady_clock;

// An event and the callback it goes to, delivered after the engine's lock is released.
struct PendingEvent {
  std::function<void(const RequestEvent&)> callback;
  RequestEvent event;
};

}  // namespace

struct Engine::Impl {
  struct Sequence {
    RequestId id = 0;
    RequestOptions options;
    std::vector<int32_t> tokens;  // prompt, then the generated ids
    size_t prompt_size = 0;
    int generated = 0;
    int64_t cached = 0;  // positions whose keys and values are in the KV cache
    int slot = -1;
    int64_t reserved_blocks = 0;  // blocks this sequence may take at most (prompt + max_new)
    std::vector<int32_t> blocks;  // its block table
    Sampler sampler;
    Sequence(RequestId id, std::vector<int32_t> prompt, RequestOptions opts)
        : id(id),
          options(std::move(opts)),
          tokens(std::move(prompt)),
          prompt_size(tokens.size()),
          sampler(options.sampling, options.seed) {}
  };

  std::shared_ptr<const ExecutionPlan> plan;
  EngineOptions options;
  std::unique_ptr<Session> session;
  KvBlockPool pool;
  int64_t vocab = 0;

  mutable std::mutex mutex;  // guards everything below
  std::condition_variable wake;
  RequestId next_id = 1;
  std::deque<std::unique_ptr<Sequence>> waiting;
  std::vector<std::unique_ptr<Sequence>> running;  // admission order
  std::vector<RequestId> cancelled;
  std::vector<int> free_slots;   // a stack; the lowest slot on top
  int64_t committed_blocks = 0;  // Σ reserved_blocks of the running sequences
  uint64_t steps = 0;
  uint64_t generated_tokens = 0;
  uint64_t prompt_tokens = 0;

  std::mutex step_mutex;  // one step() at a time
  std::thread loop;
  bool stop_loop = false;

  Impl(std::shared_ptr<const ExecutionPlan> p, EngineOptions o)
      : plan(std::move(p)), options(std::move(o)), pool(0, 1) {}

  int64_t blocks_for(int64_t positions) const {
    return (positions + options.kv_block_size - 1) / options.kv_block_size;
  }

  // Frees the sequence's slot and blocks and queues its last event.
  void retire_locked(Sequence& seq, FinishReason reason, std::string error, int32_t token,
                     std::vector<PendingEvent>& events) {
    if (seq.slot >= 0) {
      pool.release(seq.blocks);
      seq.blocks.clear();
      committed_blocks -= seq.reserved_blocks;
      free_slots.push_back(seq.slot);
      std::sort(free_slots.begin(), free_slots.end(), std::greater<>());
      seq.slot = -1;
    }
    events.push_back({seq.options.on_event, RequestEvent{seq.id, token, reason, std::move(error)}});
  }

  // Ends the cancelled requests (waiting or running).
  void apply_cancellations_locked(std::vector<PendingEvent>& events) {
    for (RequestId id : cancelled) {
      auto w = std::find_if(waiting.begin(), waiting.end(),
                            [&](const std::unique_ptr<Sequence>& s) { return s->id == id; });
      if (w != waiting.end()) {
        retire_locked(**w, FinishReason::kCancelled, {}, -1, events);
        waiting.erase(w);
        continue;
      }
      auto r = std::find_if(running.begin(), running.end(),
                            [&](const std::unique_ptr<Sequence>& s) { return s->id == id; });
      if (r != running.end()) {
        retire_locked(**r, FinishReason::kCancelled, {}, -1, events);
        running.erase(r);
      }
    }
    cancelled.clear();
  }

  // Admits waiting requests in arrival order while a slot is free and the pool can hold the
  // next one whole (a later, smaller request does not overtake it: no starvation).
  void admit_locked() {
    while (!waiting.empty() && !free_slots.empty()) {
      Sequence& seq = *waiting.front();
      const int64_t need =
          blocks_for(static_cast<int64_t>(seq.prompt_size) + seq.options.max_new_tokens);
      if (committed_blocks + need > pool.total()) break;
      seq.slot = free_slots.back();
      free_slots.pop_back();
      seq.reserved_blocks = need;
      committed_blocks += need;
      running.push_back(std::move(waiting.front()));
      waiting.pop_front();
    }
  }

  void deliver(std::vector<PendingEvent>& events) {
    for (PendingEvent& e : events) {
      if (!e.callback) continue;
      try {
        e.callback(e.event);
      } catch (const std::exception& ex) {
        MG_LOG_WARN("runtime", "engine: the event callback of request {} threw: {}", e.event.id,
                    ex.what());
      }
    }
    events.clear();
  }

  bool step();
};

Engine::Engine(std::shared_ptr<const ExecutionPlan> plan, EngineOptions options)
    : impl_(std::make_unique<Impl>(std::move(plan), std::move(options))) {
  Impl& m = *impl_;
  const ExecutionPlan& p = *m.plan;
  EngineOptions& o = m.options;
  MG_CHECK(o.max_sequences >= 1 && o.max_sequences <= kMaxEngineSequences,
           "max_sequences must be in [1, {}], got {}", kMaxEngineSequences, o.max_sequences);
  MG_CHECK(o.max_sequences <= p.max_tokens,
           "max_sequences {} exceeds the plan's max_tokens {}: every running sequence needs a row "
           "in each step (raise --max-tokens)",
           o.max_sequences, p.max_tokens);
  MG_CHECK(o.kv_block_size >= 1 && o.kv_block_size <= 4096,
           "kv_block_size must be in [1, 4096], got {}", o.kv_block_size);
  MG_CHECK(o.max_waiting >= 0, "max_waiting must be >= 0, got {}", o.max_waiting);
  const int64_t per_sequence = m.blocks_for(p.max_seq_len);
  if (o.kv_blocks == 0) o.kv_blocks = per_sequence * o.max_sequences;
  MG_CHECK(o.kv_blocks >= 1 && o.kv_blocks <= (int64_t{1} << 30),
           "kv_blocks must be in [1, 2^30], got {}", o.kv_blocks);
  m.vocab = p.values[p.logits].type.shape.back();

  SessionOptions so = o.session;
  so.max_sequences = o.max_sequences;
  so.kv_blocks = o.kv_blocks;
  so.kv_block_size = o.kv_block_size;
  m.session = std::make_unique<Session>(m.plan, so);
  m.pool = KvBlockPool(o.kv_blocks, o.kv_block_size);
  for (int s = o.max_sequences - 1; s >= 0; --s) m.free_slots.push_back(s);
}

Engine::~Engine() {
  stop();
  Impl& m = *impl_;
  std::vector<PendingEvent> events;
  {
    std::lock_guard lock(m.mutex);
    for (auto& seq : m.running) m.retire_locked(*seq, FinishReason::kCancelled, {}, -1, events);
    for (auto& seq : m.waiting) m.retire_locked(*seq, FinishReason::kCancelled, {}, -1, events);
    m.running.clear();
    m.waiting.clear();
  }
  m.deliver(events);
}

const ExecutionPlan& Engine::plan() const {
  return *impl_->plan;
}

RequestId Engine::add_request(std::vector<int32_t> prompt, RequestOptions options) {
  Impl& m = *impl_;
  const ExecutionPlan& p = *m.plan;
  MG_CHECK(!prompt.empty(), "the prompt is empty");
  MG_CHECK(options.max_new_tokens >= 1, "max_new_tokens must be >= 1, got {}",
           options.max_new_tokens);
  const int64_t total = static_cast<int64_t>(prompt.size()) + options.max_new_tokens;
  MG_CHECK(total <= p.max_seq_len,
           "prompt of {} tokens + {} new tokens exceeds the maximum sequence length {}",
           prompt.size(), options.max_new_tokens, p.max_seq_len);
  const int64_t vocab = p.info.vocab_size() > 0 ? p.info.vocab_size() : m.vocab;
  for (int32_t id : prompt) {
    MG_CHECK(id >= 0 && id < vocab, "token id {} is outside the vocabulary of {} tokens", id,
             vocab);
  }
  Sampler::validate(options.sampling);
  MG_CHECK(m.blocks_for(total) <= m.pool.total(),
           "a sequence of {} positions needs {} KV-cache blocks of {}; the pool has {}", total,
           m.blocks_for(total), m.options.kv_block_size, m.pool.total());
  RequestId id;
  {
    std::lock_guard lock(m.mutex);
    MG_CHECK(static_cast<int64_t>(m.waiting.size()) < m.options.max_waiting,
             "{} requests are already waiting (max_waiting)", m.waiting.size());
    id = m.next_id++;
    m.waiting.push_back(
        std::make_unique<Impl::Sequence>(id, std::move(prompt), std::move(options)));
  }
  m.wake.notify_all();
  return id;
}

bool Engine::cancel(RequestId id) {
  Impl& m = *impl_;
  {
    std::lock_guard lock(m.mutex);
    auto has = [&](const auto& list) {
      return std::any_of(list.begin(), list.end(),
                         [&](const std::unique_ptr<Impl::Sequence>& s) { return s->id == id; });
    };
    if (!has(m.waiting) && !has(m.running)) return false;
    if (std::find(m.cancelled.begin(), m.cancelled.end(), id) != m.cancelled.end()) return false;
    m.cancelled.push_back(id);
  }
  m.wake.notify_all();
  return true;
}

bool Engine::step() {
  return impl_->step();
}

bool Engine::Impl::step() {
  std::lock_guard step_lock(step_mutex);
  std::vector<PendingEvent> events;

  // The batch: every running sequence's next rows (decode: one; prefill: a chunk of its prompt),
  // decoding sequences first so that prompts fill the rest of the max_tokens budget.
  struct Part {
    Sequence* seq;
    int64_t rows;
  };
  std::vector<Part> parts;
  std::vector<int32_t> ids, positions, slots;
  std::vector<int64_t> logit_rows;
  std::vector<uint8_t> greedy;  // per logit row: picked by argmax (on the device on a GPU)
  {
    std::lock_guard lock(mutex);
    apply_cancellations_locked(events);
    admit_locked();
    int64_t budget = plan->max_tokens;
    for (int pass = 0; pass < 2; ++pass) {
      for (auto& owned : running) {
        Sequence& seq = *owned;
        const int64_t pending = static_cast<int64_t>(seq.tokens.size()) - seq.cached;
        const bool decoding = pending == 1;
        if (decoding != (pass == 0) || budget == 0) continue;
        const int64_t rows = std::min(pending, budget);
        budget -= rows;
        parts.push_back({&seq, rows});
        // Grow the block table to cover the new positions (reserved at admission, so the pool
        // has them).
        const int64_t need = blocks_for(seq.cached + rows);
        if (static_cast<int64_t>(seq.blocks.size()) < need) {
          pool.take(need - static_cast<int64_t>(seq.blocks.size()), seq.blocks);
          session->set_block_table(seq.slot, seq.blocks);
        }
        for (int64_t i = 0; i < rows; ++i) {
          ids.push_back(seq.tokens[static_cast<size_t>(seq.cached + i)]);
          positions.push_back(static_cast<int32_t>(seq.cached + i));
          slots.push_back(seq.slot);
        }
        if (seq.cached + rows == static_cast<int64_t>(seq.tokens.size())) {
          logit_rows.push_back(static_cast<int64_t>(ids.size()) - 1);
          greedy.push_back(seq.options.sampling.temperature == 0.0f ? 1 : 0);
        }
      }
    }
  }
  if (parts.empty()) {
    deliver(events);
    return !events.empty();
  }

  // The forward runs without the lock: add_request, cancel and stats stay responsive.
  const Tensor* logits = nullptr;
  std::string error;
  try {
    logits = &session->forward_batch(ids, positions, slots, logit_rows, greedy);
  } catch (const std::exception& e) {
    error = e.what();
  }

  {
    std::lock_guard lock(mutex);
    ++steps;
    std::vector<Sequence*> done;
    int64_t logit_index = 0;
    for (const Part& part : parts) {
      Sequence& seq = *part.seq;
      const bool sampled = seq.cached + part.rows == static_cast<int64_t>(seq.tokens.size());
      if (!error.empty()) {
        retire_locked(seq, FinishReason::kError, error, -1, events);
        done.push_back(&seq);
        continue;
      }
      if (seq.generated == 0) prompt_tokens += static_cast<uint64_t>(part.rows);
      seq.cached += part.rows;
      if (!sampled) continue;
      // Greedy rows come as the session's picks (a GPU copies back no logits for them): the
      // same argmax and the same first non-finite id the host would find.
      const int64_t index = logit_index++;
      const float* row = logits->data<float>() + index * vocab;
      const bool is_greedy = greedy[static_cast<size_t>(index)] != 0;
      const Session::GreedyPick pick =
          is_greedy ? session->greedy_picks()[static_cast<size_t>(index)] : Session::GreedyPick{};
      const int64_t bad =
          is_greedy ? pick.first_non_finite : find_non_finite(row, vocab, DType::kF32);
      if (bad >= 0) {
        retire_locked(seq, FinishReason::kError,
                      fmt::format("non-finite logits at position {} (token {}); the weights may "
                                  "hold NaN or inf",
                                  seq.cached - 1, bad),
                      -1, events);
        done.push_back(&seq);
        continue;
      }
      const int32_t next =
          is_greedy ? pick.token : seq.sampler.sample(std::span<const float>(row, vocab));
      seq.tokens.push_back(next);
      ++seq.generated;
      ++generated_tokens;
      const int64_t eos = plan->info.eos_token_id();
      const auto& stops = seq.options.stop_token_ids;
      const bool stop =
          seq.options.stop_at_eos &&
          ((eos >= 0 && next == eos) || std::find(stops.begin(), stops.end(), next) != stops.end());
      if (stop || seq.generated >= seq.options.max_new_tokens) {
        retire_locked(seq, stop ? FinishReason::kStop : FinishReason::kLength, {}, next, events);
        done.push_back(&seq);
      } else {
        events.push_back(
            {seq.options.on_event, RequestEvent{seq.id, next, FinishReason::kNone, {}}});
      }
    }
    std::erase_if(running, [&](const std::unique_ptr<Sequence>& s) {
      return std::find(done.begin(), done.end(), s.get()) != done.end();
    });
  }
  deliver(events);
  return true;
}

void Engine::start() {
  Impl& m = *impl_;
  std::lock_guard lock(m.mutex);
  MG_CHECK(!m.loop.joinable(), "the engine loop is already running");
  m.stop_loop = false;
  m.loop = std::thread([&m] {
    for (;;) {
      {
        std::unique_lock lock(m.mutex);
        m.wake.wait(lock, [&] {
          return m.stop_loop || !m.waiting.empty() || !m.running.empty() || !m.cancelled.empty();
        });
        if (m.stop_loop) return;
      }
      try {
        m.step();
      } catch (const std::exception& e) {
        MG_LOG_ERROR("runtime", "engine: step failed: {}", e.what());
      }
    }
  });
}

void Engine::stop() {
  Impl& m = *impl_;
  {
    std::lock_guard lock(m.mutex);
    m.stop_loop = true;
  }
  m.wake.notify_all();
  if (m.loop.joinable()) m.loop.join();
}

void Engine::run_until_idle() {
  while (step()) {
  }
}

EngineStats Engine::stats() const {
  const Impl& m = *impl_;
  std::lock_guard lock(m.mutex);
  EngineStats s;
  s.kv_blocks_total = m.pool.total();
  s.kv_blocks_free = m.pool.free();
  s.slots_total = m.options.max_sequences;
  s.slots_free = static_cast<int>(m.free_slots.size());
  s.running = static_cast<int>(m.running.size());
  s.waiting = static_cast<int>(m.waiting.size());
  s.steps = m.steps;
  s.generated_tokens = m.generated_tokens;
  s.prompt_tokens = m.prompt_tokens;
  return s;
}

}  // namespace mg
