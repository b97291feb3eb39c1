// `moegraph serve [MODEL]`: an OpenAI-compatible HTTP server (serve/http_server.h) for one
// model: /v1/completions, /v1/chat/completions (with the checkpoint's chat template), /v1/models
// and /health. Runs until SIGINT or SIGTERM.
#include <pthread.h>
#include <signal.h>

#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include "framework/compile/compiler.h"
#include "framework/core/checked_math.h"
#include "framework/core/error.h"
#include "framework/core/thread_pool.h"
#include "framework/runtime/session.h"
#include "framework/text/chat_template.h"
#include "framework/text/tokenizer.h"
#include "serve/engine_backend.h"
#include "serve/http_server.h"
#include "serve/sequential_backend.h"
#include "tools/moegraph/commands.h"
#include "tools/moegraph/flag_checks.h"

namespace mg::cli {

namespace {

struct ServeArgs {
  std::string model;
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string served_model_name;
  std::string tokenizer;
  std::string chat_template;
  std::string device = "cpu";
  std::string dtype;
  int threads = 0;
  int64_t max_tokens = 512;
  int64_t max_seq_len = 0;
  int http_threads = 128;
  std::string moe_backend;
  bool cuda_graph = false;
  int max_sequences = 32;
  int64_t kv_blocks = 0;
  int64_t kv_block_size = 16;
  bool sequential = false;
};

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  MG_CHECK(in.good(), "--chat-template: cannot read {}", path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The chat template: --chat-template, else the model's, else ChatML (said on startup).
std::optional<text::ChatTemplate> load_chat_template(const std::filesystem::path& graph,
                                                     const std::string& flag, std::string& note) {
  std::optional<text::ChatTemplate> model_template =
      text::ChatTemplate::load_for_model(graph.parent_path());
  if (!flag.empty()) {
    text::ChatTemplate t(read_text_file(flag), flag);
    if (model_template)
      t.set_special_tokens(model_template->bos_token(), model_template->eos_token());
    note = "chat template: " + flag;
    return t;
  }
  if (model_template) {
    note = "chat template: " + model_template->name();
    return model_template;
  }
  note = "chat template: none in the model; ChatML (<|im_start|>role ... <|im_end|>)";
  return text::ChatTemplate(text::kDefaultChatTemplate, "the default ChatML template");
}

int serve(const ServeArgs& a) {
  const std::filesystem::path graph = resolve_model(a.model);
  const auto tokenizer = text::Tokenizer::load(resolve_tokenizer(graph, a.tokenizer));
  std::string template_note;
  std::optional<text::ChatTemplate> chat_template =
      load_chat_template(graph, a.chat_template, template_note);
  const std::vector<int32_t> eos_ids = generation_eos_ids(graph);
  MG_CHECK(serve::http_server_available(),
           "this moegraph was built without cpp-httplib, so it cannot serve; install "
           "libcpp-httplib-dev (tools/install_deps.sh) and rebuild");

  CompileOptions compile;
  compile.device = Device::parse(a.device);
  if (!a.dtype.empty()) compile.activation_dtype = parse_activation_dtype(a.dtype);
  compile.max_tokens = a.max_tokens;
  compile.max_seq_len = a.max_seq_len;
  compile.moe_backend = a.moe_backend;
  SessionOptions options;
  options.threads = a.threads > 0
                        ? a.threads
                        : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  options.cuda_graph = a.cuda_graph;

  // SIGINT/SIGTERM are taken by a watcher thread (sigwait), so they are blocked before any
  // thread starts; a client that closes its socket must not kill the server with SIGPIPE.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  std::unique_ptr<serve::GenerationBackend> backend_owner;
  if (a.sequential) {
    backend_owner =
        std::make_unique<serve::SequentialBackend>(Session::open(graph, compile, options));
  } else {
    EngineOptions eo;
    eo.max_sequences = a.max_sequences;
    eo.kv_blocks = a.kv_blocks;
    eo.kv_block_size = a.kv_block_size;
    eo.session = options;
    // A forward carries one decode row per sequence at least.
    compile.max_tokens = std::max<int64_t>(compile.max_tokens, eo.max_sequences);
    backend_owner = std::make_unique<serve::EngineBackend>(compile_graph_file(graph, compile), eo);
  }
  serve::GenerationBackend& backend = *backend_owner;
  const std::string model_name =
      a.served_model_name.empty() ? backend.plan().model_name : a.served_model_name;

  serve::ServerOptions server_options;
  server_options.host = a.host;
  server_options.port = a.port;
  server_options.model_name = model_name;
  server_options.http_threads = a.http_threads;
  serve::OpenAiServer server(backend, *tokenizer, std::move(chat_template), eos_ids,
                             server_options);
  const int port = server.bind();

  std::thread watcher([&server, &stop_signals] {
    int sig = 0;
    sigwait(&stop_signals, &sig);
    server.stop();
  });
  std::cout << "moegraph serve: model '" << model_name << "' (" << graph.string() << ") on "
            << backend.plan().device.str() << ", " << options.threads << " threads, "
            << backend.describe() << "\n"
            << template_note << "\n"
            << "listening on http://" << a.host << ":" << port << std::endl;
  server.serve();
  // Whatever ended serve(), wake the watcher if it still waits.
  pthread_kill(watcher.native_handle(), SIGTERM);
  watcher.join();
  std::cout << "moegraph serve: stopped" << std::endl;
  return 0;
}

}  // namespace

Command add_serve_command(CLI::App& app) {
  auto args = std::make_shared<ServeArgs>();
  CLI::App* cmd =
      app.add_subcommand("serve",
                         "Serve a model over an OpenAI-compatible HTTP API (/v1/completions, "
                         "/v1/chat/completions, /v1/models, /health)");
  cmd->add_option("MODEL", args->model,
                  "Graph file (.pbtxt/.pb), a directory holding one, or a Hugging Face checkpoint "
                  "folder; default: the bundled model");
  cmd->add_option("--host", args->host, "Address to listen on")->capture_default_str();
  cmd->add_option("--port", args->port, "Port to listen on (0: any free port, printed)")
      ->capture_default_str()
      ->check(int_range(0, 65535));
  cmd->add_option("--served-model-name", args->served_model_name,
                  "The model's name in the API (default: the graph's model name)");
  cmd->add_option("--tokenizer", args->tokenizer,
                  "tokenizer.json (default: the one beside the graph)");
  cmd->add_option("--chat-template", args->chat_template,
                  "A Jinja chat template file (default: the model's tokenizer_config.json or "
                  "chat_template.jinja; ChatML when it has none)");
  cmd->add_option("--device", args->device, "cpu, cuda or cuda:N")->capture_default_str();
  cmd->add_option("--dtype", args->dtype, "Activation dtype: bf16, f16 or f32");
  cmd->add_option("--threads", args->threads, "CPU threads for kernels (default: all cores)")
      ->check(int_range(0, max_threads()));
  cmd->add_option("--max-tokens", args->max_tokens,
                  "Largest chunk of tokens per forward (prefill runs in chunks of this size)")
      ->capture_default_str()
      ->check(int_range(1, kMaxTokensPerForward));
  cmd->add_option("--max-seq-len", args->max_seq_len,
                  "Context length: prompt + completion (default: the model's max_seq_len)")
      ->check(int_range(0, kMaxSeqLen));
  cmd->add_option("--http-threads", args->http_threads,
                  "Connections served at once (a streaming client holds one while it streams)")
      ->capture_default_str()
      ->check(int_range(1, 4096));
  cmd->add_option("--moe-backend", args->moe_backend,
                  "Force this expert backend on every MoE node (error if it does not fit)");
  cmd->add_flag("--cuda-graph", args->cuda_graph,
                "Capture the decode step as a CUDA graph and replay it (CUDA devices)");
  cmd->add_option("--max-sequences", args->max_sequences,
                  "Sequences generated at once (continuous batching); more requests wait")
      ->capture_default_str()
      ->check(int_range(1, kMaxEngineSequences));
  cmd->add_option("--kv-blocks", args->kv_blocks,
                  "KV-cache blocks in the pool (default: enough for every sequence to reach the "
                  "context length)")
      ->check(int_range(0, kMaxSeqLen));
  cmd->add_option("--kv-block-size", args->kv_block_size, "Positions per KV-cache block")
      ->capture_default_str()
      ->check(int_range(1, 4096));
  cmd->add_flag("--sequential", args->sequential,
                "Generate one request at a time with a plain session (no batching; a reference "
                "for the batching engine)");
  return [args] { return serve(*args); };
}

}  // namespace mg::cli
