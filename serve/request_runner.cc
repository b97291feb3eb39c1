#include "serve/request_runner.h"

#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>

#include "framework/text/utf8.h"

namespace mg::serve {

namespace {

// Events of one request, from the backend's thread to the handler's.
struct EventQueue {
  std::mutex mutex;
  std::condition_variable ready;
  std::deque<RequestEvent> events;
};

// How often a handler waiting for tokens checks that its client is still connected.
constexpr auto kLivenessPoll = std::chrono::milliseconds(100);

// The largest prefix length of `text` (from `from`) that cannot be the start of a stop string,
// cut back to a UTF-8 character boundary.
size_t safe_emit_end(const std::string& text, size_t from, size_t longest_stop) {
  if (longest_stop <= 1) return text.size();
  size_t end = text.size() >= longest_stop - 1 ? text.size() - (longest_stop - 1) : 0;
  end = std::max(end, from);
  while (end > from && end < text.size() &&
         (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) {
    --end;
  }
  return end;
}

}  // namespace

RunResult run_request(GenerationBackend& backend, const text::Tokenizer& tokenizer,
                      RunRequest request, const std::function<bool(std::string_view)>& on_text,
                      const std::function<bool()>& client_alive) {
  auto queue = std::make_shared<EventQueue>();
  request.options.on_event = [queue](const RequestEvent& e) {
    {
      std::lock_guard lock(queue->mutex);
      queue->events.push_back(e);
    }
    queue->ready.notify_one();
  };
  size_t longest_stop = 0;
  for (const std::string& s : request.stop) longest_stop = std::max(longest_stop, s.size());

  const RequestId id = backend.add_request(std::move(request.prompt), std::move(request.options));
  RunResult result;
  text::DecodeStream stream(tokenizer, /*skip_special_tokens=*/true);
  std::vector<int32_t> ids;
  std::string text;    // decoded so far
  size_t emitted = 0;  // bytes of `text` given to on_text
  bool client_gone = false;
  bool stopped_by_string = false;
  bool cancel_sent = false;
  const auto cancel_once = [&] {
    if (!cancel_sent) backend.cancel(id);
    cancel_sent = true;
  };
  const auto emit = [&](size_t end) {
    if (client_gone || end <= emitted) return;
    if (!on_text(std::string_view(text).substr(emitted, end - emitted))) {
      client_gone = true;
      cancel_once();
    }
    emitted = end;
  };
  // Looks for a stop string in the text not yet emitted (it may begin before `emitted`'s
  // hold-back window); cuts the text there.
  const auto find_stop = [&]() {
    if (request.stop.empty() || stopped_by_string) return;
    const size_t from = emitted;
    size_t best = std::string::npos;
    for (const std::string& s : request.stop) {
      const size_t hit = text.find(s, from);
      if (hit != std::string::npos) best = std::min(best, hit);
    }
    if (best == std::string::npos) return;
    text.resize(best);
    stopped_by_string = true;
    cancel_once();
  };

  FinishReason finish = FinishReason::kNone;
  while (finish == FinishReason::kNone) {
    RequestEvent e;
    {
      std::unique_lock lock(queue->mutex);
      if (!queue->ready.wait_for(lock, kLivenessPoll, [&] { return !queue->events.empty(); })) {
        lock.unlock();
        if (!client_gone && !client_alive()) {
          client_gone = true;
          cancel_once();
        }
        continue;
      }
      e = queue->events.front();
      queue->events.pop_front();
    }
    if (e.token >= 0 && !stopped_by_string) {
      ++result.completion_tokens;
      ids.push_back(e.token);
      const text::DecodeStream::Step step = stream.step(e.token);
      if (step.text) text += *step.text;
      find_stop();
      emit(stopped_by_string ? text.size() : safe_emit_end(text, emitted, longest_stop));
    }
    finish = e.finish;
    if (finish == FinishReason::kError) result.error = e.error;
  }
  if (!stopped_by_string && finish != FinishReason::kCancelled) {
    // What the stream held back (an incomplete character at the end, a decoder's final fix-up).
    const std::string all = tokenizer.decode(ids, true);
    if (all.size() > text.size() && all.starts_with(text)) text = all;
    find_stop();
  }
  emit(text.size());
  result.text = std::move(text);
  if (client_gone) {
    result.finish_reason.clear();
  } else if (stopped_by_string || finish == FinishReason::kStop) {
    result.finish_reason = "stop";
  } else if (finish == FinishReason::kLength) {
    result.finish_reason = "length";
  }
  return result;
}

}  // namespace mg::serve
