#include "tools/moegraph/bench_serve.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "framework/compile/compiler.h"
#include "framework/core/error.h"
#include "framework/io/graph_loader.h"
#include "framework/runtime/engine.h"
#include "tools/bench/decode_floor.h"
#include "tools/moegraph/commands.h"

namespace mg::cli {

namespace {

using Clock = std::chrono::steady_clock;

// What a decode step reads, from the graph: see bench_serve.h.
struct StepBytes {
  double dense = 0;   // every weight but the routed experts and the embedding table
  double expert = 0;  // one expert of one layer, at its stored bytes (packed codes and scales)
  std::vector<double> layer_k_e;  // per MoE layer: top_k and num_experts
  std::vector<int64_t> layer_e;
  double kv_per_position = 0;  // K and V of every attention layer, one position of one sequence

  double experts_touched(int64_t rows) const {  // Σ over layers of D(rows) * expert bytes
    double bytes = 0;
    for (size_t l = 0; l < layer_e.size(); ++l) {
      const double e = static_cast<double>(layer_e[l]);
      bytes += e * (1.0 - std::pow(1.0 - layer_k_e[l] / e, static_cast<double>(rows))) * expert;
    }
    return bytes;
  }
};

StepBytes step_bytes(const std::filesystem::path& graph, DType dtype) {
  const proto::Model model = load_graph(graph);
  StepBytes s;
  double top_k_sum = 0;
  for (const auto& node : model.nodes()) {
    if (node.has_moe()) {
      s.layer_e.push_back(node.moe().num_experts());
      s.layer_k_e.push_back(static_cast<double>(node.moe().top_k()));
      top_k_sum += static_cast<double>(node.moe().top_k());
    }
    if (node.has_attention()) {
      const auto& a = node.attention();
      const int64_t v = a.v_head_dim() > 0 ? a.v_head_dim() : a.head_dim();
      s.kv_per_position += static_cast<double>(a.num_kv_heads() * (a.head_dim() + v)) *
                           static_cast<double>(dtype_size(dtype));
    }
  }
  // The weights as `bench e2e` counts them (tools/bench/decode_floor.h): quantized tensors at
  // their stored bytes with their scales. Its routed-expert share is top_k of each layer's
  // experts, so one expert of a layer is that share over the layers' summed top_k (exact when
  // the MoE layers are alike, as in every family we import).
  const DecodeWeightBytes w = decode_weight_bytes(model, dtype);
  s.dense = w.dense;
  s.expert = top_k_sum > 0 ? w.experts / top_k_sum : 0.0;
  return s;
}

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())));
  return v[i];
}

std::vector<int> parse_batches(const std::string& text) {
  std::vector<int> out;
  for (int32_t b : parse_id_list(text, "--batch")) {
    MG_CHECK(b >= 1 && b <= kMaxEngineSequences, "--batch: {} is outside [1, {}]", b,
             kMaxEngineSequences);
    out.push_back(b);
  }
  MG_CHECK(!out.empty(), "--batch: no batch sizes given");
  return out;
}

struct Round {
  double seconds = 0;         // wall time of the whole round
  double decode_seconds = 0;  // the steps in which every sequence decodes (see run_round)
  int64_t decode_steps = 0;
  int64_t tokens = 0;          // all generated tokens
  std::vector<double> gaps_s;  // between consecutive tokens of a sequence
};

// One round of `batch` requests joining at once. The prompts are prefilled in chunks of the
// plan's max_tokens, so the sequences get their first tokens over several steps and finish as
// many steps apart: the decode rate at `batch` is taken over the steps after every sequence has
// its first token up to the step of the first sequence's last (each of them gives every sequence
// one token), timed from the end of the step before to the end of the last one.
Round run_round(Engine& engine, int batch, int prompt_tokens, int new_tokens, float temperature,
                int64_t vocab, uint64_t salt) {
  struct Token {
    uint64_t step;
    Clock::time_point time;
  };
  std::mutex mutex;
  std::vector<std::vector<Token>> tokens(static_cast<size_t>(batch));
  std::map<uint64_t, Clock::time_point> step_end;  // the time of each step's last event
  for (int s = 0; s < batch; ++s) {
    std::vector<int32_t> prompt(static_cast<size_t>(prompt_tokens));
    for (int i = 0; i < prompt_tokens; ++i) {
      prompt[static_cast<size_t>(i)] = static_cast<int32_t>(
          (static_cast<uint64_t>(i) * 7919 + s * 104729 + salt) % static_cast<uint64_t>(vocab));
    }
    RequestOptions o;
    o.max_new_tokens = new_tokens;
    o.stop_at_eos = false;
    o.sampling.temperature = temperature;
    o.seed = salt + static_cast<uint64_t>(s);
    o.on_event = [&, s](const RequestEvent& e) {
      if (e.token < 0) return;
      const uint64_t step = engine.stats().steps;  // counted before the step's events
      const Clock::time_point now = Clock::now();
      std::lock_guard lock(mutex);
      tokens[static_cast<size_t>(s)].push_back({step, now});
      step_end[step] = now;
    };
    engine.add_request(std::move(prompt), std::move(o));
  }
  const auto start = Clock::now();
  engine.run_until_idle();
  Round r;
  r.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  uint64_t all_started = 0, first_done = std::numeric_limits<uint64_t>::max();
  for (const auto& t : tokens) {
    MG_ASSERT(!t.empty(), "a sequence of the round generated nothing");
    all_started = std::max(all_started, t.front().step);
    first_done = std::min(first_done, t.back().step);
    r.tokens += static_cast<int64_t>(t.size());
    for (size_t i = 1; i < t.size(); ++i) {
      r.gaps_s.push_back(std::chrono::duration<double>(t[i].time - t[i - 1].time).count());
    }
  }
  if (first_done > all_started) {
    r.decode_steps = static_cast<int64_t>(first_done - all_started);
    r.decode_seconds =
        std::chrono::duration<double>(step_end.at(first_done) - step_end.at(all_started)).count();
  }
  return r;
}

}  // namespace

int bench_serve(const BenchServeArgs& a) {
  MG_CHECK(a.prompt_tokens > 0 && a.decode_tokens > 1,
           "bench serve: --prompt-tokens must be positive and --decode-tokens at least 2");
  const std::vector<int> batches = parse_batches(a.batches);
  const int max_batch = *std::max_element(batches.begin(), batches.end());
  const std::filesystem::path graph = resolve_model(a.model);
  CompileOptions compile;
  compile.device = Device::parse(a.device);
  if (!a.dtype.empty()) compile.activation_dtype = parse_activation_dtype(a.dtype);
  compile.max_seq_len = a.prompt_tokens + a.decode_tokens + 1;
  // Decode steps take one row per sequence; prompts are prefilled in chunks of up to 512 rows
  // (as bench e2e), so the largest batch must fit too.
  compile.max_tokens = std::max<int64_t>(max_batch, std::min(a.prompt_tokens * max_batch, 512));
  compile.random_weights = a.random_weights;
  // Measured before the weights take the device's memory (the copy needs 2 GiB of it).
  const double bandwidth = measure_copy_bandwidth(compile.device);
  const std::shared_ptr<const ExecutionPlan> plan = compile_graph_file(graph, compile);
  const DType dtype = activation_dtype_of(compile);
  const int64_t vocab = plan->values[plan->logits].type.shape.back();

  const StepBytes bytes = step_bytes(graph, dtype);
  std::cout << fmt::format(
      "model: {} on {} ({}{}{}), prompt {} tokens, {} new tokens per sequence, {}\n",
      plan->model_name, compile.device.str(), dtype_name(dtype),
      a.cuda_graph ? ", decode steps as CUDA graphs" : "",
      a.random_weights ? ", random weights" : "", a.prompt_tokens, a.decode_tokens,
      a.temperature == 0.0f ? std::string("greedy")
                            : fmt::format("sampled at temperature {}", a.temperature));
  std::cout << fmt::format(
      "floor: dense weights {:.1f} MB, {} MoE layers of {:.2f} MB experts, KV {:.1f} KB per "
      "position, copy bandwidth {:.0f} GB/s\n",
      bytes.dense / 1e6, bytes.layer_e.size(), bytes.expert / 1e6, bytes.kv_per_position / 1e3,
      bandwidth / 1e9);
  std::cout << fmt::format("{:>6} {:>12} {:>12} {:>10} {:>10} {:>10} {:>11} {:>12} {:>8}\n",
                           "batch", "decode tok/s", "e2e tok/s", "step ms", "ITL p50", "ITL p99",
                           "floor ms", "floor tok/s", "%floor");
  for (int batch : batches) {
    EngineOptions eo;
    eo.max_sequences = batch;
    eo.session.threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    eo.session.cuda_graph = a.cuda_graph;
    Engine engine(plan, eo);
    // Warm-up: a round of the same shape (other prompts), so that the CUDA graphs of the row
    // counts the timed round steps through (all `batch` decoding, then fewer as sequences finish)
    // are captured before it, and caches and allocator pools are warm.
    run_round(engine, batch, a.prompt_tokens, a.decode_tokens, a.temperature, vocab, 1);
    const Round r =
        run_round(engine, batch, a.prompt_tokens, a.decode_tokens, a.temperature, vocab, 2);
    const double step_s =
        r.decode_steps > 0 ? r.decode_seconds / static_cast<double>(r.decode_steps) : 0;
    const double context = a.prompt_tokens + a.decode_tokens / 2.0;
    const double floor_bytes =
        bytes.dense + bytes.experts_touched(batch) + batch * context * bytes.kv_per_position;
    const double floor_s = floor_bytes / bandwidth;
    std::cout << fmt::format(
        "{:>6} {:>12.1f} {:>12.1f} {:>10.3f} {:>9.3f}ms {:>9.3f}ms {:>11.3f} {:>12.1f} {:>7.1f}%\n",
        batch, step_s > 0 ? batch / step_s : 0.0, r.tokens / r.seconds, step_s * 1e3,
        percentile(r.gaps_s, 0.5) * 1e3, percentile(r.gaps_s, 0.99) * 1e3, floor_s * 1e3,
        batch / floor_s, step_s > 0 ? 100.0 * floor_s / step_s : 0.0);
  }
  std::cout << "decode tok/s: batch / step time over the steps where every sequence decodes (0: "
               "none, raise --decode-tokens); e2e: all tokens over the round (prefill included); "
               "ITL: time between a sequence's consecutive tokens\n";
  return 0;
}

}  // namespace mg::cli
