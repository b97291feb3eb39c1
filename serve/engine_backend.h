// GenerationBackend over the batching Engine (framework/runtime/engine.h): requests from every
// connection join one continuous batch; the engine steps on its own background thread.
#pragma once

#include <memory>

#include "framework/runtime/engine.h"
#include "serve/generation_backend.h"

namespace mg::serve {

class EngineBackend : public GenerationBackend {
 public:
  // Starts the engine's loop; the destructor stops it (unfinished requests end cancelled).
  EngineBackend(std::shared_ptr<const ExecutionPlan> plan, EngineOptions options);
  ~EngineBackend() override;

  RequestId add_request(std::vector<int32_t> prompt, RequestOptions options) override {
    return engine_.add_request(std::move(prompt), std::move(options));
  }
  bool cancel(RequestId id) override { return engine_.cancel(id); }
  EngineStats stats() const override { return engine_.stats(); }
  const ExecutionPlan& plan() const override { return engine_.plan(); }
  std::string describe() const override;

 private:
  EngineOptions options_;
  Engine engine_;
};

}  // namespace mg::serve
