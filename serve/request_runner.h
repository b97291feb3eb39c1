// Runs one request on a GenerationBackend and turns its tokens into text as they come: streaming
// decode (never half a UTF-8 character), stop strings (text up to the first one is returned, the
// rest is held back until it cannot start a stop string, and the sequence is cancelled when one
// is found), and the client's liveness: when the client is gone the sequence is cancelled and
// the call returns only after the backend let go of it.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "framework/runtime/engine.h"
#include "framework/text/tokenizer.h"
#include "serve/generation_backend.h"

namespace mg::serve {

struct RunRequest {
  std::vector<int32_t> prompt;
  RequestOptions options;  // on_event is set by run_request
  std::vector<std::string> stop;
};

struct RunResult {
  std::string text;  // the whole returned text (stop string excluded)
  int64_t completion_tokens = 0;
  // "stop" (eos, a stop id or a stop string), "length", or empty when the client went away.
  std::string finish_reason;
  std::string error;  // the backend failed (FinishReason::kError)
};

// `on_text(delta)` gets each new piece of text; it returns false when the client is gone.
// `client_alive()` is polled while no tokens come (a request waiting for a slot).
RunResult run_request(GenerationBackend& backend, const text::Tokenizer& tokenizer,
                      RunRequest request, const std::function<bool(std::string_view)>& on_text,
                      const std::function<bool()>& client_alive);

}  // namespace mg::serve
