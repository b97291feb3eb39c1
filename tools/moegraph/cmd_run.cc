// `moegraph run [MODEL]`: prefill a prompt (--prompt text through the model's tokenizer, or
// --prompt-ids) and generate tokens, streaming their text with --prompt; optionally dump the
// prompt's logits, profile per node, write a Chrome trace. Several --prompt (or --prompt-ids)
// values are generated together by the batching Engine (framework/runtime/engine.h).
#include <chrono>
#include <iostream>
#include <optional>
#include <thread>

#include "framework/compile/compiler.h"
#include "framework/core/checked_math.h"
#include "framework/core/error.h"
#include "framework/core/thread_pool.h"
#include "framework/io/npy.h"
#include "framework/io/regular_file.h"
#include "framework/io/weight_scan.h"
#include "framework/parallel/launch_env.h"
#include "framework/runtime/engine.h"
#include "framework/runtime/local_ranks.h"
#include "framework/runtime/process_ranks.h"
#include "framework/runtime/session.h"
#include "framework/text/tokenizer.h"
#include "tools/moegraph/commands.h"
#include "tools/moegraph/flag_checks.h"

namespace mg::cli {

namespace {

struct RunArgs {
  std::string model;
  std::vector<std::string> prompts;  // --prompt, in order; more than one: batched
  std::string prompt;                // the first
  bool prompt_given = false;
  std::string tokenizer;
  std::vector<std::string> prompt_id_lists;  // --prompt-ids, in order
  std::string prompt_ids = "1,2,3,4,5,6,7,8";
  int max_sequences = 0;  // --max-sequences; 0: one per prompt
  int max_new_tokens = 16;
  std::string device = "cpu";
  std::string dtype;
  int threads = 0;
  std::string dump_logits;
  float temperature = 0.0f;
  int top_k = 0;
  float top_p = 1.0f;
  uint64_t seed = 0;
  bool profile = false;
  bool cuda_graph = false;
  bool no_fuse = false;
  std::string trace;
  int64_t max_tokens = 512;
  int64_t max_seq_len = 0;
  std::string moe_backend;
  std::string activation_quant = "dynamic";
  int tp = 1;
  int dp = 1;
  bool ep = false;
  std::string moe_dispatch = "allgather";
  std::optional<uint64_t> random_weights;
  bool check_weights = false;
};

void check_prompt_ids(std::span<const int32_t> prompt, int64_t vocab_size, bool from_text) {
  for (int32_t id : prompt) {
    MG_CHECK(id < vocab_size, "{}: token id {} is outside the model's vocabulary of {} tokens{}",
             from_text ? "--prompt" : "--prompt-ids", id, vocab_size,
             from_text ? " (the tokenizer does not belong to this model; pass --tokenizer)" : "");
  }
}

// --prompt: the prompt's ids through the model's tokenizer, with its special tokens (BOS).
std::vector<int32_t> encode_prompt(const text::Tokenizer& tokenizer, const std::string& prompt) {
  std::vector<int32_t> ids = tokenizer.encode(prompt, true);
  MG_CHECK(!ids.empty(), "--prompt: the text encodes to no tokens; give some text");
  return ids;
}

// Prints generated text as the tokens come (text::DecodeStream: never half a UTF-8 character),
// special tokens left out; finish() prints what the stream held back at the end.
class TextPrinter {
 public:
  explicit TextPrinter(const text::Tokenizer& tokenizer)
      : tokenizer_(tokenizer), stream_(tokenizer, /*skip_special_tokens=*/true) {}
  void on_token(int32_t id) {
    ids_.push_back(id);
    const text::DecodeStream::Step step = stream_.step(id);
    if (step.text) {
      std::cout << *step.text << std::flush;
      printed_ += *step.text;
    }
  }
  void finish() {
    const std::string all = tokenizer_.decode(ids_, true);
    if (all.size() > printed_.size() && all.starts_with(printed_)) {
      std::cout << all.substr(printed_.size());
    }
    std::cout << "\n";
  }

 private:
  const text::Tokenizer& tokenizer_;
  text::DecodeStream stream_;
  std::vector<int32_t> ids_;
  std::string printed_;
};

std::vector<int32_t> positions_for(size_t n) {
  std::vector<int32_t> positions(n);
  for (size_t i = 0; i < n; ++i) positions[i] = static_cast<int32_t>(i);
  return positions;
}

void print_result(const std::string& who, std::span<const int32_t> prompt, const GenerateResult& r,
                  const text::Tokenizer* tokenizer = nullptr) {
  if (tokenizer != nullptr) {
    std::cout << who << "generated text: " << tokenizer->decode(r.tokens, true) << "\n";
  }
  std::cout << who << "prompt ids: " << fmt::format("{}", fmt::join(prompt, " ")) << "\n";
  std::cout << who << "generated ids: " << fmt::format("{}", fmt::join(r.tokens, " ")) << "\n";
  const size_t decoded = r.tokens.empty() ? 0 : r.tokens.size() - 1;
  std::cout << who
            << fmt::format("prefill: {} tokens in {:.2f} ms ({:.1f} tokens/s)\n", r.prompt_tokens,
                           r.prefill_seconds * 1e3, r.prompt_tokens / r.prefill_seconds);
  if (decoded > 0) {
    std::cout << who
              << fmt::format("decode: {} tokens in {:.2f} ms ({:.1f} tokens/s)\n", decoded,
                             r.decode_seconds * 1e3, decoded / r.decode_seconds);
  }
}

// --tp/--dp/--ep: one thread per rank (framework/runtime/local_ranks.h). DP rank d drops the
// last d prompt tokens, so DP ranks carry uneven token counts; world rank 0 runs the whole
// prompt, and its logits are the ones --dump-logits writes. Every rank makes the same calls
// (one prefill, then max-new-tokens - 1 decode steps, no early stop at eos) so the MoE
// collectives stay in lockstep.
//
// Launched as one of several processes (`launch`: torchrun-style environment, or
// --nproc-per-node), this process is one rank on GPU LOCAL_RANK and the ranks talk through NCCL.
int run_parallel(const RunArgs& a, const std::filesystem::path& graph,
                 const std::vector<int32_t>& prompt, const text::Tokenizer* tokenizer,
                 CompileOptions compile, SessionOptions options,
                 const std::optional<LaunchEnv>& launch) {
  LocalRanksOptions ranks{a.tp, a.dp, a.ep, MoEDispatch::kAllGatherReduceScatter};
  if (a.moe_dispatch == "alltoall") {
    ranks.dispatch = MoEDispatch::kAllToAll;
  } else {
    MG_CHECK(a.moe_dispatch == "allgather",
             "--moe-dispatch: unknown value '{}' (expected allgather or alltoall)", a.moe_dispatch);
  }
  MG_CHECK(a.tp <= kMaxRanks / a.dp, "--tp {} x --dp {} is more than the {} ranks one run may have",
           a.tp, a.dp, kMaxRanks);
  const int world = a.tp * a.dp;
  MG_CHECK(world > 1 || !a.ep, "--ep needs more than one rank (--tp or --dp > 1)");
  if (!launch) {
    MG_CHECK(compile.device.is_cpu(),
             "--tp/--dp/--ep on {}: GPU ranks are processes, one per GPU; start them with "
             "--nproc-per-node {} (or torchrun-style RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT)",
             compile.device.str(), world);
  }
  compile.max_tokens = std::max<int64_t>(compile.max_tokens, static_cast<int64_t>(prompt.size()));
  if (!launch) options.threads = std::max(1, options.threads / world);
  struct RankResult {
    ParallelConfig config;
    std::vector<int32_t> prompt;
    GenerateResult result;
  };
  std::vector<RankResult> results(world);
  std::string model_name;
  auto run_rank = [&](const ParallelConfig& pc, Session& s) {
    const size_t drop = std::min<size_t>(prompt.size() - 1, static_cast<size_t>(pc.dp_rank()));
    std::vector<int32_t> own(prompt.begin(), prompt.end() - static_cast<std::ptrdiff_t>(drop));
    check_prompt_ids(own, s.plan().info.vocab_size(), a.prompt_given);
    if (!a.dump_logits.empty()) {
      const Tensor& logits = s.forward(own, positions_for(own.size()));
      if (pc.world_rank() == 0) write_npy(a.dump_logits, logits);
    }
    GenerateOptions gen;
    gen.max_new_tokens = a.max_new_tokens;
    gen.sampling = {a.temperature, a.top_k, a.top_p};
    gen.seed = a.seed;
    gen.stop_at_eos = false;
    RankResult& r = results[pc.world_rank()];
    r.config = pc;
    r.prompt = own;
    r.result = s.generate(own, gen);
    if (pc.world_rank() == 0) model_name = s.plan().model_name;
  };
  if (launch) {
    // This process is one rank; it prints its own result (rank 0 the model line too).
    const std::string steps = fmt::format("prompt={} max_new_tokens={} dump_logits={}",
                                          prompt.size(), a.max_new_tokens, !a.dump_logits.empty());
    run_process_rank(graph, compile, options, ranks, *launch, steps, run_rank);
    const RankResult& r = results[launch->rank];
    if (launch->rank == 0) {
      std::cout << "model: " << model_name << " (" << graph.string() << ") on " << world
                << " GPU processes (NCCL)\n";
    }
    if (r.config.tp_rank() == 0) {
      print_result(fmt::format("[rank {}: {}] ", launch->rank, r.config.str()), r.prompt, r.result,
                   tokenizer);
    }
    return 0;
  }
  run_local_ranks(graph, compile, options, ranks, run_rank);
  std::cout << "model: " << model_name << " (" << graph.string() << ") on " << world
            << " cpu ranks, " << options.threads << " threads each\n";
  for (const RankResult& r : results) {
    if (r.config.tp_rank() != 0) continue;  // TP ranks of a DP group produce the same tokens
    print_result(fmt::format("[{}] ", r.config.str()), r.prompt, r.result, tokenizer);
  }
  return 0;
}

// --check-weights: scans every weight of the graph for NaN and infinity before running, and
// names the first tensor that holds one.
void check_weights_are_finite(const std::filesystem::path& graph, bool random_weights) {
  MG_CHECK(!random_weights,
           "--check-weights scans the weight files, which --random-weights does not read");
  int64_t checked = 0;
  const std::optional<NonFiniteWeight> bad = find_non_finite_weight(graph, &checked);
  MG_CHECK(!bad,
           "--check-weights: weight tensor '{}' (file {}) holds a NaN or infinity at element {}",
           bad->tensor, bad->file, bad->element);
  std::cout << fmt::format("--check-weights: {} weight tensors, all finite\n", checked);
}

// Several prompts: one Engine generates them together (continuous batching over a paged KV
// cache); each one's text or ids are printed when all are done, in the order given.
int run_batch(const RunArgs& a, const std::filesystem::path& graph,
              const std::vector<std::vector<int32_t>>& prompts, const text::Tokenizer* tokenizer,
              const std::vector<int32_t>& eos_ids, CompileOptions compile, SessionOptions options) {
  MG_CHECK(a.dump_logits.empty() && !a.profile && a.trace.empty(),
           "--dump-logits, --profile and --trace take one prompt; {} were given", prompts.size());
  EngineOptions eo;
  eo.max_sequences = a.max_sequences > 0 ? a.max_sequences : static_cast<int>(prompts.size());
  compile.max_tokens = std::max<int64_t>(compile.max_tokens, eo.max_sequences);
  eo.session = options;
  Engine engine(compile_graph_file(graph, compile), eo);
  std::vector<std::vector<int32_t>> generated(prompts.size());
  std::vector<FinishReason> finish(prompts.size(), FinishReason::kNone);
  std::vector<std::string> errors(prompts.size());
  const auto start = std::chrono::steady_clock::now();
  for (size_t i = 0; i < prompts.size(); ++i) {
    check_prompt_ids(prompts[i], engine.plan().info.vocab_size(), a.prompt_given);
    RequestOptions r;
    r.max_new_tokens = a.max_new_tokens;
    r.sampling = {a.temperature, a.top_k, a.top_p};
    r.seed = a.seed + i;
    r.stop_token_ids = eos_ids;
    r.on_event = [&, i](const RequestEvent& e) {
      if (e.token >= 0) generated[i].push_back(e.token);
      if (e.finish != FinishReason::kNone) {
        finish[i] = e.finish;
        errors[i] = e.error;
      }
    };
    engine.add_request(prompts[i], r);
  }
  engine.run_until_idle();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const EngineStats stats = engine.stats();
  std::cout << "model: " << engine.plan().model_name << " (" << graph.string() << ") on "
            << engine.plan().device.str() << " (" << dtype_name(activation_dtype_of(compile))
            << "), " << options.threads << " threads, " << prompts.size() << " sequences, "
            << eo.max_sequences << " at once\n";
  for (size_t i = 0; i < prompts.size(); ++i) {
    const std::string who = fmt::format("[{}] ", i);
    if (tokenizer != nullptr) {
      std::cout << who << "text: " << a.prompts[i] << tokenizer->decode(generated[i], true) << "\n";
    }
    std::cout << who << "prompt ids: " << fmt::format("{}", fmt::join(prompts[i], " ")) << "\n";
    std::cout << who << "generated ids: " << fmt::format("{}", fmt::join(generated[i], " ")) << " ("
              << finish_reason_name(finish[i]) << ")\n";
    MG_CHECK(finish[i] != FinishReason::kError, "sequence {}: {}", i, errors[i]);
  }
  std::cout << fmt::format(
      "{} steps, {} prompt + {} generated tokens in {:.2f} ms ({:.1f} generated tokens/s)\n",
      stats.steps, stats.prompt_tokens, stats.generated_tokens, seconds * 1e3,
      stats.generated_tokens / seconds);
  return 0;
}

int run(const RunArgs& a) {
  // Output paths fail before the model is loaded and run, not after.
  if (!a.dump_logits.empty()) check_output_path(a.dump_logits, "--dump-logits");
  if (!a.trace.empty()) check_output_path(a.trace, "--trace");
  const std::filesystem::path graph = resolve_model(a.model);
  std::unique_ptr<text::Tokenizer> tokenizer;
  std::vector<std::vector<int32_t>> prompts;
  if (a.prompt_given) {
    tokenizer = text::Tokenizer::load(resolve_tokenizer(graph, a.tokenizer));
    for (const std::string& text : a.prompts) prompts.push_back(encode_prompt(*tokenizer, text));
  } else if (a.prompt_id_lists.empty()) {
    prompts.push_back(parse_id_list(a.prompt_ids, "--prompt-ids"));
  } else {
    for (const std::string& ids : a.prompt_id_lists) {
      prompts.push_back(parse_id_list(ids, "--prompt-ids"));
    }
  }
  const std::vector<int32_t> prompt = prompts.front();
  const std::vector<int32_t> eos_ids = generation_eos_ids(graph);
  if (a.check_weights) check_weights_are_finite(graph, a.random_weights.has_value());
  CompileOptions compile;
  compile.device = Device::parse(a.device);
  if (!a.dtype.empty()) compile.activation_dtype = parse_activation_dtype(a.dtype);
  compile.max_tokens = a.max_tokens;
  compile.max_seq_len = a.max_seq_len;
  compile.moe_backend = a.moe_backend;
  compile.quantize_activations = a.activation_quant != "none";
  compile.quantize_dense_activations = a.activation_quant == "dynamic";
  compile.random_weights = a.random_weights;
  compile.fuse_ops = !a.no_fuse;
  SessionOptions options;
  options.threads = a.threads > 0
                        ? a.threads
                        : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  options.profile = a.profile || !a.trace.empty();
  options.cuda_graph = a.cuda_graph;
  // A launcher's environment makes this process one rank (a CPU run of one process ignores it).
  std::optional<LaunchEnv> launch = LaunchEnv::from_environment(kMaxRanks);
  if (launch && launch->world_size == 1 && !compile.device.is_cuda()) launch.reset();
  if (prompts.size() > 1 || a.max_sequences > 0) {
    MG_CHECK(a.tp == 1 && a.dp == 1 && !a.ep && !launch,
             "--tp/--dp/--ep and launched ranks take one prompt; {} were given", prompts.size());
    return run_batch(a, graph, prompts, tokenizer.get(), eos_ids, compile, options);
  }
  if (a.tp > 1 || a.dp > 1 || a.ep || launch) {
    return run_parallel(a, graph, prompt, tokenizer.get(), compile, options, launch);
  }
  auto session = Session::open(graph, compile, options);
  const ExecutionPlan& plan = session->plan();
  check_prompt_ids(prompt, plan.info.vocab_size(), a.prompt_given);

  if (!a.dump_logits.empty()) {
    write_npy(a.dump_logits, session->forward(prompt, positions_for(prompt.size())));
  }

  GenerateOptions gen;
  gen.max_new_tokens = a.max_new_tokens;
  gen.sampling = {a.temperature, a.top_k, a.top_p};
  gen.seed = a.seed;
  gen.stop_token_ids = eos_ids;
  std::optional<TextPrinter> printer;
  if (tokenizer) {
    std::cout << a.prompt << std::flush;
    printer.emplace(*tokenizer);
    gen.on_token = [&printer](int32_t id) { printer->on_token(id); };
  }
  const GenerateResult r = session->generate(prompt, gen);
  if (printer) printer->finish();

  std::cout << "model: " << plan.model_name << " (" << graph.string() << ") on "
            << plan.device.str() << " (" << dtype_name(activation_dtype_of(compile)) << "), "
            << options.threads << " threads\n";
  print_result("", prompt, r);
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
  CLI::Option* prompt =
      cmd->add_option("--prompt", args->prompts,
                      "Prompt text, encoded with the model's tokenizer (tokenizer.json beside the "
                      "graph, or --tokenizer); the generated text is printed as it comes. Give it "
                      "several times to generate the prompts together (batched)")
          ->allow_extra_args(false)
          ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  CLI::Option* ids =
      cmd->add_option("--prompt-ids", args->prompt_id_lists,
                      "Prompt token ids, comma separated (default: 1,2,3,4,5,6,7,8); "
                      "several times: generated together (batched)")
          ->allow_extra_args(false)
          ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  prompt->excludes(ids);
  cmd->add_option("--tokenizer", args->tokenizer,
                  "tokenizer.json for --prompt (default: the one beside the graph)")
      ->needs(prompt);
  cmd->add_option("--max-new-tokens", args->max_new_tokens, "Tokens to generate")
      ->capture_default_str()
      ->check(int_range(0, kMaxSeqLen));
  cmd->add_option("--max-sequences", args->max_sequences,
                  "Batched generation: sequences run at once (default: one per prompt); more "
                  "prompts than this wait for a free slot")
      ->check(int_range(1, kMaxEngineSequences));
  cmd->add_option("--device", args->device, "cpu, cuda or cuda:N")->capture_default_str();
  cmd->add_option("--dtype", args->dtype,
                  "Activation dtype: bf16, f16 or f32 (default: f32 on cpu, bf16 on cuda; the "
                  "CPU runs f32 only)");
  cmd->add_option("--threads", args->threads,
                  "CPU threads (default: all cores; at most 4 per core, at least 64)")
      ->check(int_range(0, max_threads()));
  cmd->add_option("--dump-logits", args->dump_logits,
                  "Write the prompt's logits as float32 [T, vocab] to this .npy file");
  cmd->add_option("--temperature", args->temperature, "Sampling temperature; 0 is greedy")
      ->capture_default_str();
  cmd->add_option("--top-k", args->top_k, "Sample among the k most likely tokens (0: all)")
      ->capture_default_str();
  cmd->add_option("--top-p", args->top_p, "Nucleus sampling threshold")->capture_default_str();
  cmd->add_option("--seed", args->seed, "Sampling seed")
      ->capture_default_str()
      ->check(non_negative_u64());
  cmd->add_flag("--profile", args->profile, "Print per-op timings");
  cmd->add_flag("--no-fuse", args->no_fuse,
                "Run the graph as written: no fuse-ops compile pass (add + rms_norm fusion)");
  cmd->add_flag("--cuda-graph", args->cuda_graph,
                "Capture the decode step as a CUDA graph and replay it (CUDA devices)");
  cmd->add_option("--trace", args->trace, "Write a Chrome trace (JSON) of every node to FILE");
  cmd->add_option("--max-tokens", args->max_tokens,
                  "Largest chunk of tokens per forward (prefill runs in chunks of this size)")
      ->capture_default_str()
      ->check(int_range(1, kMaxTokensPerForward));
  cmd->add_option("--max-seq-len", args->max_seq_len,
                  "KV cache length (default: the model's max_seq_len)")
      ->check(int_range(0, kMaxSeqLen));
  cmd->add_option("--random-weights", args->random_weights,
                  "Fill the weights with random values from this seed instead of reading them "
                  "(for graphs written by make-model --graph-only; output is noise)")
      ->check(non_negative_u64());
  cmd->add_flag("--check-weights", args->check_weights,
                "Scan every weight for NaN and infinity before running; name the first tensor "
                "that holds one");
  cmd->add_option("--activation-quant", args->activation_quant,
                  "Activations of FP8 (W8A8) weights: dynamic (quantized per call wherever the "
                  "checkpoint says: W8A8), experts (the MoE experts' only; dense ops keep theirs) "
                  "or none (W8A16: weights read as FP8, activations kept in the compute dtype)")
      ->capture_default_str()
      ->check(CLI::IsMember({"dynamic", "experts", "none"}));
  cmd->add_option("--moe-backend", args->moe_backend,
                  "Force this expert backend on every MoE node (error if it does not fit)");
  cmd->add_option("--tp", args->tp,
                  "Tensor-parallel ranks (CPU: threads; CUDA: one process per GPU, started with "
                  "--nproc-per-node or a launcher; MoE experts are split)")
      ->capture_default_str()
      ->check(int_range(1, kMaxRanks));
  cmd->add_option("--dp", args->dp,
                  "Data-parallel ranks (CPU: threads; CUDA: processes; each runs its own prompt, "
                  "MoE tokens are "
                  "exchanged)")
      ->capture_default_str()
      ->check(int_range(1, kMaxRanks));
  cmd->add_flag("--ep", args->ep,
                "Expert parallelism over the tp x dp ranks (whole experts per rank)");
  cmd->add_option("--moe-dispatch", args->moe_dispatch,
                  "How DP ranks exchange MoE tokens: allgather (all-gather + reduce-scatter) or "
                  "alltoall (needs --ep, --tp 1)")
      ->capture_default_str();
  return [args, prompt] {
    args->prompt_given = prompt->count() > 0;
    if (args->prompt_given) args->prompt = args->prompts.front();
    return run(*args);
  };
}

}  // namespace mg::cli
