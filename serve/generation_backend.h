// What the server needs from a generator: queue a request, cancel it, read counters. Engine
// (framework/runtime/engine.h, continuous batching) has exactly this shape; SequentialBackend
// (sequential_backend.h) is the one-sequence-at-a-time implementation over Session::generate.
//
// Events (RequestOptions::on_event) arrive on the backend's thread; the request's last event has
// `finish` set, and after it the backend holds nothing of the request (its sequence slot and KV
// cache are free again), which is what the server's disconnect test checks through stats().
#pragma once

#include <cstdint>
#include <vector>

#include "framework/runtime/engine.h"

namespace mg::serve {

class GenerationBackend {
 public:
  virtual ~GenerationBackend() = default;
  // Throws mg::Error for a request the backend cannot take (the server validates first, so this
  // is a full queue or a bug).
  virtual RequestId add_request(std::vector<int32_t> prompt, RequestOptions options) = 0;
  // Ends the request early; its last event then has FinishReason::kCancelled. False when it
  // already finished.
  virtual bool cancel(RequestId id) = 0;
  virtual EngineStats stats() const = 0;
  virtual const ExecutionPlan& plan() const = 0;
  // A short description for the startup line ("sequential", "engine, 32 sequences").
  virtual std::string describe() const = 0;
};

}  // namespace mg::serve
