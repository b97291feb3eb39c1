// The OpenAI-compatible HTTP server of `moegraph serve`, over cpp-httplib (Debian's
// libcpp-httplib-dev): GET /health, GET /v1/models, POST /v1/completions and
// POST /v1/chat/completions (streaming by server-sent events with "stream": true). Each
// connection is handled on its own thread of a pool and feeds the GenerationBackend; a client
// that disconnects has its sequence cancelled (docs/server.md).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "framework/text/chat_template.h"
#include "framework/text/tokenizer.h"
#include "serve/generation_backend.h"

namespace mg::serve {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;  // 0: any free port (bind() returns it)
  std::string model_name;
  // Connections served at once (each streaming client holds one thread while it streams).
  int http_threads = 128;
  // Completions without max_tokens generate this many (OpenAI's default); chat without it may
  // use the rest of the context.
  int default_completion_tokens = 16;
};

// False when this binary was built without cpp-httplib (then OpenAiServer throws mg::Error).
bool http_server_available();

class OpenAiServer {
 public:
  // `chat_template`: the model's (nullopt: /v1/chat/completions answers 400). `eos_ids`:
  // generation_config.json's, stopping generation beside the graph's eos.
  OpenAiServer(GenerationBackend& backend, const text::Tokenizer& tokenizer,
               std::optional<text::ChatTemplate> chat_template, std::vector<int32_t> eos_ids,
               ServerOptions options);
  ~OpenAiServer();
  OpenAiServer(const OpenAiServer&) = delete;
  OpenAiServer& operator=(const OpenAiServer&) = delete;

  // Binds host:port; returns the port. mg::Error when it cannot (in use, bad address).
  int bind();
  // Serves until stop() (from another thread, e.g. a signal watcher).
  void serve();
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mg::serve
