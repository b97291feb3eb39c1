// The OpenAI API's request and response bodies (/v1/completions, /v1/chat/completions), as the
// `openai` client and vLLM shape them: validation of every field we read with OpenAI-style errors
// (HTTP status, {"error": {"message", "type", "param", "code"}}), and the JSON of responses and
// stream chunks. No HTTP here (http_server.cc), no generation (request_runner.h).
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "framework/runtime/sampler.h"

namespace mg::serve {

using ojson = nlohmann::ordered_json;

// A request the API refuses: the HTTP status and the error object's fields.
class ApiError : public std::runtime_error {
 public:
  ApiError(int status, std::string message, std::string param = {}, std::string code = {},
           std::string type = "invalid_request_error")
      : std::runtime_error(message),
        status(status),
        param(std::move(param)),
        code(std::move(code)),
        type(std::move(type)) {}
  int status;
  std::string param;
  std::string code;
  std::string type;
};

// {"error": {"message": ..., "type": ..., "param": ... or null, "code": ... or null}}
ojson error_body(const ApiError& e);

// Parses a request body; ApiError 400 for bad JSON or a body that is not an object.
ojson parse_body(const std::string& body);

// What both endpoints take beside the prompt.
struct GenerationParams {
  std::optional<int> max_tokens;  // unset: the endpoint's default
  SamplingOptions sampling;
  std::optional<uint64_t> seed;
  std::vector<std::string> stop;  // stop strings (not part of the returned text)
  bool ignore_eos = false;        // vLLM's extension
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
};

struct CompletionRequest {
  GenerationParams params;
  std::optional<std::string> prompt_text;  // "prompt": "text" (or ["text"])
  std::vector<int32_t> prompt_ids;         // "prompt": [1, 2, 3] (or [[1, 2, 3]])
  bool echo = false;
};

struct ChatRequest {
  GenerationParams params;
  ojson messages;  // validated: [{"role": str, "content": str|null, ...}], parts flattened
  ojson tools;     // null for none
  ojson template_kwargs = ojson::object();  // chat_template_kwargs
  bool add_generation_prompt = true;
};

// `served_model`: the name /v1/models lists; a request naming another model is ApiError 404
// (code model_not_found). A missing "model" means the served one.
CompletionRequest parse_completion_request(const ojson& body, const std::string& served_model);
ChatRequest parse_chat_request(const ojson& body, const std::string& served_model);

// ApiError 400 (code context_length_exceeded) when prompt + completion exceed the context;
// `what` is "prompt" or "messages".
void check_context(int64_t prompt_tokens, int64_t max_tokens, int64_t max_seq_len,
                   const char* what);

// Response bodies. `finish_reason` empty: null (a stream chunk before the end).
struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
};
ojson usage_json(const Usage& u);
ojson completion_body(const std::string& id, int64_t created, const std::string& model,
                      const std::string& text, const std::string& finish_reason,
                      const std::optional<Usage>& usage, bool chunk);
ojson chat_body(const std::string& id, int64_t created, const std::string& model,
                const std::string& text, const std::string& finish_reason, const Usage& usage);
// A chat stream chunk: `delta` is {"role": "assistant", "content": ""} first, then
// {"content": text}, then {} with the finish reason.
ojson chat_chunk(const std::string& id, int64_t created, const std::string& model,
                 const ojson& delta, const std::string& finish_reason);
// The last chunk of a stream with stream_options.include_usage: no choices, the usage.
ojson usage_chunk(const std::string& id, int64_t created, const std::string& model,
                  const char* object, const Usage& usage);
ojson models_body(const std::string& model, int64_t created, int64_t max_model_len);

// "cmpl-<24 hex>" / "chatcmpl-<24 hex>": unique per process run.
std::string new_request_id(const char* prefix);

}  // namespace mg::serve
