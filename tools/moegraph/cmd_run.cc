// `moegraph run [MODEL]`: prefill a prompt and generate tokens; optionally dump the prompt's
// logits, profile per node, write a Chrome trace.
#include <iostream>
#include <thread>

#include "framework/core/error.h"
#include "framework/io/npy.h"
#include "framework/runtime/session.h"
#include "tools/moegraph/commands.h"

namespace mg::cli {

namespace {

struct RunArgs {
  std::string model;
  std::string prompt_ids = "1,2,3,4,5,6,7,8";
  int max_new_tokens = 16;
  std::string device = "cpu";
  int threads = 0;
  std::string dump_logits;
  float temperature = 0.0f;
  int top_k = 0;
  float top_p = 1.0f;
  uint64_t seed = 0;
  bool profile = false;
  std::string trace;
  int64_t max_tokens = 512;
  int64_t max_seq_len = 0;
  std::string moe_backend;
};

int run(const RunArgs& a) {
  const std::filesystem::path graph = resolve_model(a.model);
  const std::vector<int32_t> prompt = parse_id_list(a.prompt_ids, "--prompt-ids");
  CompileOptions compile;
  compile.device = Device::parse(a.device);
  compile.max_tokens = a.max_tokens;
  compile.max_seq_len = a.max_seq_len;
  compile.moe_backend = a.moe_backend;
  SessionOptions options;
  options.threads =
      a.threads > 0 ? a.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  options.profile = a.profile || !a.trace.empty();
  auto session = Session::open(graph, compile, options);
  const ExecutionPlan& plan = session->plan();
  for (int32_t id : prompt) {
    MG_CHECK(id < plan.info.vocab_size(), "--prompt-ids: token id {} is outside the vocabulary of "
             "{} tokens", id, plan.info.vocab_size());
  }

  if (!a.dump_logits.empty()) {
    std::vector<int32_t> positions(prompt.size());
    for (size_t i = 0; i < positions.size(); ++i) positions[i] = static_cast<int32_t>(i);
    write_npy(a.dump_logits, session->forward(prompt, positions));
  }

  GenerateOptions gen;
  gen.max_new_tokens = a.max_new_tokens;
  gen.sampling = {a.temperature, a.top_k, a.top_p};
  gen.seed = a.seed;
  const GenerateResult r = session->generate(prompt, gen);

  std::cout << "model: " << plan.model_name << " (" << graph.string() << ") on "
            << plan.device.str() << ", " << options.threads << " threads\n";
  std::cout << "prompt ids: " << fmt::format("{}", fmt::join(prompt, " ")) << "\n";
  std::cout << "generated ids: " << fmt::format("{}", fmt::join(r.tokens, " ")) << "\n";
  const size_t decoded = r.tokens.empty() ? 0 : r.tokens.size() - 1;
  std::cout << fmt::format("prefill: {} tokens in {:.2f} ms ({:.1f} tokens/s)\n", r.prompt_tokens,
                           r.prefill_seconds * 1e3, r.prompt_tokens / r.prefill_seconds);
  if (decoded > 0) {
    std::cout << fmt::format("decode: {} tokens in {:.2f} ms ({:.1f} tokens/s)\n", decoded,
                             r.decode_seconds * 1e3, decoded / r.decode_seconds);
  }
  if (a.profile) std::cout << session->profiler().summary();
  if (!a.trace.empty()) {
    session->profiler().write_trace(a.trace);
    std::cout << "trace written to " << a.trace << "\n";
  }
  return 0;
}

}  // namespace

Command add_run_command(CLI::App& app) {
  auto args = std::make_shared<RunArgs>();
  CLI::App* cmd = app.add_subcommand("run", "Run a model: prefill the prompt, generate tokens");
  cmd->add_option("MODEL", args->model,
                  "Graph file (.pbtxt/.pb) or a directory holding one; default: the bundled model");
  cmd->add_option("--prompt-ids", args->prompt_ids, "Prompt token ids, comma separated")
      ->capture_default_str();
  cmd->add_option("--max-new-tokens", args->max_new_tokens, "Tokens to generate")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--device", args->device, "cpu, cuda or cuda:N")->capture_default_str();
  cmd->add_option("--threads", args->threads, "CPU threads (default: all cores)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--dump-logits", args->dump_logits,
                  "Write the prompt's logits as float32 [T, vocab] to this .npy file");
  cmd->add_option("--temperature", args->temperature, "Sampling temperature; 0 is greedy")
      ->capture_default_str();
  cmd->add_option("--top-k", args->top_k, "Sample among the k most likely tokens (0: all)")
      ->capture_default_str();
  cmd->add_option("--top-p", args->top_p, "Nucleus sampling threshold")->capture_default_str();
  cmd->add_option("--seed", args->seed, "Sampling seed")->capture_default_str();
  cmd->add_flag("--profile", args->profile, "Print per-op timings");
  cmd->add_option("--trace", args->trace, "Write a Chrome trace (JSON) of every node to FILE");
  cmd->add_option("--max-tokens", args->max_tokens,
                  "Largest chunk of tokens per forward (prefill runs in chunks of this size)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--max-seq-len", args->max_seq_len,
                  "KV cache length (default: the model's max_seq_len)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--moe-backend", args->moe_backend,
                  "Force this expert backend on every MoE node (error if it does not fit)");
  return [args] { return run(*args); };
}

}  // namespace mg::cli
