#include "serve/engine_backend.h"

#include <fmt/format.h>

namespace mg::serve {

EngineBackend::EngineBackend(std::shared_ptr<const ExecutionPlan> plan, EngineOptions options)
    : options_(options), engine_(std::move(plan), std::move(options)) {
  engine_.start();
}

EngineBackend::~EngineBackend() {
  engine_.stop();
}

std::string EngineBackend::describe() const {
  const EngineStats s = engine_.stats();
  return fmt::format("continuous batching: {} sequences at once, {} KV blocks of {} positions",
                     s.slots_total, s.kv_blocks_total, options_.kv_block_size);
}

}  // namespace mg::serve
