#include "serve/http_server.h"

#include <atomic>
#include <chrono>
#include <mutex>
#include <random>

#include "framework/core/error.h"
#include "serve/openai_protocol.h"
#include "serve/request_runner.h"

#ifdef MG_WITH_HTTPLIB
#include <httplib.h>
#endif

namespace mg::serve {

#ifdef MG_WITH_HTTPLIB

bool http_server_available() {
  return true;
}

namespace {

// Request bodies above this are refused (a 16 MiB prompt is the tokenizer's own limit).
constexpr size_t kMaxBodyBytes = 32u << 20;

std::string dump(const ojson& j) {
  // Replacement of ill-formed UTF-8 instead of an exception: generated text is always valid, but
  // a request's echoed strings need not be.
  return j.dump(-1, ' ', false, ojson::error_handler_t::replace);
}

std::string sse(const ojson& j) {
  return "data: " + dump(j) + "\n\n";
}

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// A validated request, ready to run.
struct Prepared {
  bool chat = false;
  RunRequest run;
  bool stream = false;
  bool include_usage = false;
  std::string echo;  // completions with "echo": the prompt's text, returned first
  std::string id;
  int64_t created = 0;
  int64_t prompt_tokens = 0;
};

}  // namespace

struct OpenAiServer::Impl {
  Impl(GenerationBackend& b, const text::Tokenizer& t, std::optional<text::ChatTemplate> c,
       std::vector<int32_t> e, ServerOptions o)
      : backend(b),
        tokenizer(t),
        chat_template(std::move(c)),
        eos_ids(std::move(e)),
        options(std::move(o)),
        created(unix_now()) {}

  GenerationBackend& backend;
  const text::Tokenizer& tokenizer;
  std::optional<text::ChatTemplate> chat_template;
  std::vector<int32_t> eos_ids;
  ServerOptions options;
  int64_t created;
  httplib::Server http;
  std::atomic<int> active_requests{0};
  std::atomic<uint64_t> disconnected_requests{0};
  std::atomic<uint64_t> served_requests{0};
  std::mt19937_64 seed_rng{std::random_device{}()};
  std::mutex seed_mutex;

  void install_routes();
  void send_error(httplib::Response& res, const ApiError& e) {
    res.status = e.status;
    res.set_content(dump(error_body(e)), "application/json");
  }
  RequestOptions request_options(const GenerationParams& p, int max_tokens) {
    RequestOptions o;
    o.max_new_tokens = max_tokens;
    o.sampling = p.sampling;
    if (p.seed) {
      o.seed = *p.seed;
    } else {
      std::lock_guard lock(seed_mutex);
      o.seed = seed_rng();
    }
    o.stop_at_eos = !p.ignore_eos;
    if (!p.ignore_eos) o.stop_token_ids = eos_ids;
    return o;
  }
  void check_ids(const std::vector<int32_t>& ids, const char* param) {
    const int64_t vocab = backend.plan().info.vocab_size();
    for (int32_t id : ids) {
      if (id < 0 || id >= vocab) {
        throw ApiError(
            400,
            fmt::format("token id {} is outside the model's vocabulary of {} tokens", id, vocab),
            param);
      }
    }
  }
  Prepared prepare_completion(const ojson& body);
  Prepared prepare_chat(const ojson& body);
  void run_prepared(Prepared& p, httplib::DataSink& sink);
  void handle_generation(const httplib::Request& req, httplib::Response& res, bool chat);
};

Prepared OpenAiServer::Impl::prepare_completion(const ojson& body) {
  CompletionRequest r = parse_completion_request(body, options.model_name);
  Prepared p;
  if (r.prompt_text) {
    p.run.prompt = tokenizer.encode(*r.prompt_text, /*add_special_tokens=*/true);
    if (r.echo) p.echo = *r.prompt_text;
  } else {
    p.run.prompt = r.prompt_ids;
    check_ids(p.run.prompt, "prompt");
    if (r.echo) p.echo = tokenizer.decode(p.run.prompt, false);
  }
  if (p.run.prompt.empty()) throw ApiError(400, "the prompt encodes to no tokens", "prompt");
  const int max_tokens = r.params.max_tokens.value_or(options.default_completion_tokens);
  check_context(static_cast<int64_t>(p.run.prompt.size()), max_tokens, backend.plan().max_seq_len,
                "prompt");
  p.run.options = request_options(r.params, max_tokens);
  p.run.stop = r.params.stop;
  p.stream = r.params.stream;
  p.include_usage = r.params.include_usage;
  p.id = new_request_id("cmpl");
  return p;
}

Prepared OpenAiServer::Impl::prepare_chat(const ojson& body) {
  ChatRequest r = parse_chat_request(body, options.model_name);
  if (!chat_template) {
    throw ApiError(400,
                   "this model has no chat template (tokenizer_config.json 'chat_template' or "
                   "chat_template.jinja); use /v1/completions or start the server with "
                   "--chat-template FILE");
  }
  text::ChatRenderOptions render;
  render.add_generation_prompt = r.add_generation_prompt;
  render.tools = r.tools;
  render.kwargs = r.template_kwargs;
  std::string prompt_text;
  try {
    prompt_text = chat_template->render(r.messages, render);
  } catch (const Error& e) {
    throw ApiError(400, e.what(), "messages");
  }
  Prepared p;
  p.chat = true;
  // The template writes the special tokens (BOS) itself.
  p.run.prompt = tokenizer.encode(prompt_text, /*add_special_tokens=*/false);
  if (p.run.prompt.empty())
    throw ApiError(400, "the conversation renders to no tokens", "messages");
  const int64_t max_seq_len = backend.plan().max_seq_len;
  const int64_t prompt_tokens = static_cast<int64_t>(p.run.prompt.size());
  const int max_tokens = r.params.max_tokens.value_or(
      static_cast<int>(std::max<int64_t>(1, max_seq_len - prompt_tokens)));
  check_context(prompt_tokens, max_tokens, max_seq_len, "messages");
  p.run.options = request_options(r.params, max_tokens);
  p.run.stop = r.params.stop;
  p.stream = r.params.stream;
  p.include_usage = r.params.include_usage;
  p.id = new_request_id("chatcmpl");
  return p;
}

void OpenAiServer::Impl::run_prepared(Prepared& p, httplib::DataSink& sink) {
  ++active_requests;
  const std::string& model = options.model_name;
  const char* object = p.chat ? "chat.completion.chunk" : "text_completion";
  Usage usage;
  usage.prompt_tokens = p.prompt_tokens;
  const auto write = [&](const std::string& s) { return sink.write(s.data(), s.size()); };
  const auto text_chunk = [&](std::string_view text) {
    return p.chat
               ? chat_chunk(p.id, p.created, model, ojson{{"content", text}}, "")
               : completion_body(p.id, p.created, model, std::string(text), "", std::nullopt, true);
  };
  bool alive = true;
  if (p.stream) {
    if (p.chat) {
      alive = write(sse(
          chat_chunk(p.id, p.created, model, ojson{{"role", "assistant"}, {"content", ""}}, "")));
    }
    if (alive && !p.echo.empty()) alive = write(sse(text_chunk(p.echo)));
  }
  RunResult result;
  if (alive) {
    try {
      result = run_request(
          backend, tokenizer, std::move(p.run),
          [&](std::string_view text) {
            return p.stream ? write(sse(text_chunk(text))) : sink.is_writable();
          },
          [&] { return sink.is_writable(); });
    } catch (const Error& e) {
      result.error = e.what();
    }
  }
  usage.completion_tokens = result.completion_tokens;
  if (!alive || (result.finish_reason.empty() && result.error.empty())) {
    ++disconnected_requests;
  } else if (!result.error.empty()) {
    const ApiError error(503, result.error, "", "", "server_error");
    write(p.stream ? sse(error_body(error)) + "data: [DONE]\n\n" : dump(error_body(error)));
  } else if (p.stream) {
    const ojson last =
        p.chat
            ? chat_chunk(p.id, p.created, model, ojson::object(), result.finish_reason)
            : completion_body(p.id, p.created, model, "", result.finish_reason, std::nullopt, true);
    write(sse(last));
    if (p.include_usage) write(sse(usage_chunk(p.id, p.created, model, object, usage)));
    write("data: [DONE]\n\n");
  } else {
    const ojson body =
        p.chat ? chat_body(p.id, p.created, model, result.text, result.finish_reason, usage)
               : completion_body(p.id, p.created, model, p.echo + result.text, result.finish_reason,
                                 usage, false);
    write(dump(body));
  }
  ++served_requests;
  --active_requests;
}

void OpenAiServer::Impl::handle_generation(const httplib::Request& req, httplib::Response& res,
                                           bool chat) {
  try {
    const ojson body = parse_body(req.body);
    auto p = std::make_shared<Prepared>(chat ? prepare_chat(body) : prepare_completion(body));
    p->created = unix_now();
    p->prompt_tokens = static_cast<int64_t>(p->run.prompt.size());
    if (p->stream) res.set_header("Cache-Control", "no-cache");
    // Chunked even when not streaming: the provider can see a client that went away while its
    // sequence is still generating, and cancel it.
    res.set_chunked_content_provider(p->stream ? "text/event-stream" : "application/json",
                                     [this, p](size_t, httplib::DataSink& sink) {
                                       run_prepared(*p, sink);
                                       sink.done();
                                       return true;
                                     });
  } catch (const ApiError& e) {
    send_error(res, e);
  } catch (const Error& e) {
    send_error(res, ApiError(400, e.what()));
  }
}

void OpenAiServer::Impl::install_routes() {
  http.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    const EngineStats s = backend.stats();
    const ojson body{{"status", "ok"},
                     {"model", options.model_name},
                     {"backend", backend.describe()},
                     {"active_requests", active_requests.load()},
                     {"served_requests", served_requests.load()},
                     {"disconnected_requests", disconnected_requests.load()},
                     {"running", s.running},
                     {"waiting", s.waiting},
                     {"slots_total", s.slots_total},
                     {"slots_free", s.slots_free},
                     {"kv_blocks_total", s.kv_blocks_total},
                     {"kv_blocks_free", s.kv_blocks_free},
                     {"generated_tokens", s.generated_tokens}};
    res.set_content(dump(body), "application/json");
  });
  http.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(dump(models_body(options.model_name, created, backend.plan().max_seq_len)),
                    "application/json");
  });
  http.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
    handle_generation(req, res, false);
  });
  http.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
    handle_generation(req, res, true);
  });
  http.set_error_handler(httplib::Server::HandlerWithResponse([this](const httplib::Request& req,
                                                                     httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    const int status = res.status;
    send_error(res, ApiError(status,
                             status == 404 ? fmt::format("no route {} {}", req.method, req.path)
                                           : fmt::format("HTTP error {}", status),
                             "", "", status == 404 ? "not_found_error" : "invalid_request_error"));
    return httplib::Server::HandlerResponse::Handled;
  }));
  http.set_exception_handler(
      [this](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
        std::string what = "internal error";
        try {
          std::rethrow_exception(ep);
        } catch (const std::exception& e) {
          what = e.what();
        } catch (...) {
        }
        send_error(res, ApiError(500, what, "", "", "server_error"));
      });
  const int threads = options.http_threads;
  http.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  http.set_payload_max_length(kMaxBodyBytes);
}

OpenAiServer::OpenAiServer(GenerationBackend& backend, const text::Tokenizer& tokenizer,
                           std::optional<text::ChatTemplate> chat_template,
                           std::vector<int32_t> eos_ids, ServerOptions options)
    : impl_(std::make_unique<Impl>(backend, tokenizer, std::move(chat_template), std::move(eos_ids),
                                   std::move(options))) {
  MG_CHECK(impl_->options.http_threads >= 1, "--http-threads must be >= 1, got {}",
           impl_->options.http_threads);
  impl_->install_routes();
}

OpenAiServer::~OpenAiServer() = default;

int OpenAiServer::bind() {
  const ServerOptions& o = impl_->options;
  MG_CHECK(o.port >= 0 && o.port <= 65535, "--port must be 0..65535, got {}", o.port);
  if (o.port == 0) {
    const int port = impl_->http.bind_to_any_port(o.host);
    MG_CHECK(port > 0, "cannot listen on {} (any port)", o.host);
    return port;
  }
  MG_CHECK(impl_->http.bind_to_port(o.host, o.port),
           "cannot listen on {}:{} (in use, or not an address of this machine)", o.host, o.port);
  return o.port;
}

void OpenAiServer::serve() {
  impl_->http.listen_after_bind();
}

void OpenAiServer::stop() {
  impl_->http.stop();
}

#else  // !MG_WITH_HTTPLIB

bool http_server_available() {
  return false;
}

struct OpenAiServer::Impl {};

OpenAiServer::OpenAiServer(GenerationBackend&, const text::Tokenizer&,
                           std::optional<text::ChatTemplate>, std::vector<int32_t>, ServerOptions) {
  MG_FAIL(
      "this moegraph was built without cpp-httplib, so it cannot serve; install "
      "libcpp-httplib-dev (tools/install_deps.sh) and rebuild");
}
OpenAiServer::~OpenAiServer() = default;
int OpenAiServer::bind() {
  return 0;
}
void OpenAiServer::serve() {}
void OpenAiServer::stop() {}

#endif

}  // namespace mg::serve
