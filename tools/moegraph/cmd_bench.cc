// `moegraph bench moe` (one MoE layer per backend against its floor, ops/moe/bench),
// `moegraph bench e2e MODEL` (prefill and decode tokens/s of a whole model),
// `moegraph bench serve MODEL` (batched generation per batch size, bench_serve.h) and
// `moegraph bench soak MODEL` (many decode steps; fails when host or device memory grows) and
// `moegraph bench gemv` (linear's GEMV path against cuBLASLt on the one-token projections).
#include <algorithm>
#include <chrono>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "framework/core/checked_math.h"
#include "framework/core/error.h"
#include "framework/core/int_quant.h"
#include "framework/device/allocator.h"
#include "framework/device/memory_usage.h"
#include "framework/io/graph_loader.h"
#include "framework/io/json.h"
#include "framework/io/regular_file.h"
#include "framework/parallel/launch_env.h"
#include "framework/runtime/local_ranks.h"
#include "framework/runtime/process_ranks.h"
#include "framework/runtime/session.h"
#include "tools/bench/decode_floor.h"
#include "tools/moegraph/bench_plot.h"
#include "tools/moegraph/bench_serve.h"
#include "tools/moegraph/commands.h"
#include "tools/moegraph/flag_checks.h"
#ifdef MG_WITH_CUDA
#include "ops/moe/bench/moe_bench_cuda.h"
#include "ops/nn/linear/gemv_bench_cuda.h"
#endif

namespace mg::cli {

namespace {

struct BenchMoeArgs {
  std::string shapes = "all";
  int64_t hidden = 0, inter = 0, experts = 0, topk = 0;
  std::string tokens = "1,16,64,256,1024,4096,16384";
  std::string backends = "all";
  std::string kernels;  // cuda_moe kernels, timed as backends cuda_moe:KERNEL
  std::string dtype = "bf16";
  std::string quant = "none";
  int sets = 4;
  double target_ms = 200;
  bool no_check = false;
  std::string json;
  std::string png;
};

#ifdef MG_WITH_CUDA

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    item.erase(std::remove(item.begin(), item.end(), ' '), item.end());
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

int bench_moe(const BenchMoeArgs& a) {
  // Output paths fail before the minutes of timing, not after.
  if (!a.json.empty()) check_output_path(a.json, "--json");
  if (!a.png.empty()) check_output_path(a.png, "--png");
  // A CUDA build on a machine without a GPU: the user's environment, said before any CUDA call.
  MG_CHECK(cuda_device_count() > 0,
           "bench moe times the CUDA expert backends and this machine has no CUDA GPU; run it "
           "on a machine with one (bench e2e --device cpu times a whole model on the CPU)");
  MoEBenchOptions o;
  if (a.hidden || a.inter || a.experts || a.topk) {
    MG_CHECK(a.hidden > 0 && a.inter > 0 && a.experts > 0 && a.topk > 0,
             "bench moe: a custom shape needs all of --hidden, --inter, --experts and --topk");
    o.shapes.push_back({fmt::format("H{}-I{}-E{}-k{}", a.hidden, a.inter, a.experts, a.topk),
                        a.hidden, a.inter, a.experts, a.topk});
  } else {
    for (const std::string& name : split_list(a.shapes)) {
      bool found = false;
      for (const MoEBenchShape& s : moe_bench_shapes()) {
        if (name == "all" || name == s.name) {
          o.shapes.push_back(s);
          found = true;
        }
      }
      std::string known;
      for (const MoEBenchShape& s : moe_bench_shapes()) known += " " + s.name;
      MG_CHECK(found, "bench moe: unknown --shape '{}' (known: all{})", name, known);
    }
  }
  for (const std::string& t : split_list(a.tokens)) {
    int64_t v = 0;
    try {
      v = std::stoll(t);
    } catch (const std::exception&) {
      MG_FAIL("--tokens: '{}' is not a number", t);
    }
    MG_CHECK(v > 0 && v <= kMaxTokensPerForward, "--tokens: {} is out of range [1, {}]", v,
             kMaxTokensPerForward);
    o.tokens.push_back(v);
  }
  if (a.quant == "fp8-block") {
    o.quant = QuantScheme::kFp8Block;
  } else if (a.quant == "fp8-channel") {
    o.quant = QuantScheme::kFp8PerChannel;
  } else if (a.quant == "fp8-tensor") {
    o.quant = QuantScheme::kFp8PerTensor;
  } else if (a.quant == "mxfp4") {
    o.quant = QuantScheme::kMxfp4;
  } else if (a.quant == "nvfp4") {
    o.quant = QuantScheme::kNvfp4;
  } else if (const auto int_quant = parse_int_quant(a.quant)) {
    // Weight-only integer codes, named as make-model --quant names them (int4-g128, ...).
    o.int_element = int_quant->first;
    o.int_group = int_quant->second;
    o.quant = quant_element_bits(o.int_element) == 4 ? QuantScheme::kInt4WeightOnly
                                                     : QuantScheme::kInt8WeightOnly;
  }
  const bool fp4 = o.quant == QuantScheme::kMxfp4 || o.quant == QuantScheme::kNvfp4;
  const bool wna16 =
      o.quant == QuantScheme::kInt4WeightOnly || o.quant == QuantScheme::kInt8WeightOnly;
  // The backend that --quant's weights are timed on (its kernels: --kernel): cuda_fp8 for FP8.
  const std::string quant_backend = fp4 ? "cuda_fp4" : wna16 ? "cuda_wna16" : "cuda_fp8";
  const bool quantized = o.quant != QuantScheme::kUnquantized;
  if (a.backends != "all") {
    o.backends = split_list(a.backends);
  } else if (a.kernels.empty()) {
    o.backends = quantized ? std::vector<std::string>{quant_backend}
                           : std::vector<std::string>{"cuda_moe", "cuda_grouped", "cuda_cublas"};
  }
  // Forced kernels (ops/moe/heuristics/unquantized_kernel_choice.h, fp8_kernel_choice.h,
  // cuda/wna16/wna16_experts_cuda.h): `--kernel grouped_tma` times backend cuda_moe:grouped_tma
  // (cuda_fp8:KERNEL, cuda_fp4:KERNEL, cuda_wna16:KERNEL with --quant); one that cannot run a
  // shape is an error saying why.
  for (const std::string& kernel : split_list(a.kernels))
    o.backends.push_back((quantized ? quant_backend : std::string("cuda_moe")) + ":" + kernel);
  MG_CHECK(a.dtype == "bf16" || a.dtype == "f16", "--dtype: expected bf16 or f16, got '{}'",
           a.dtype);
  o.dtype = a.dtype == "bf16" ? DType::kBF16 : DType::kF16;
  o.sets = a.sets;
  o.target_ms = a.target_ms;
  o.check = !a.no_check;

  const MoEBenchCeilings ceil = measure_moe_bench_ceilings();
  std::cout << fmt::format(
      "ceilings (measured): copy {:.3f} TB/s (read + write), bf16 8192^3 GEMM {:.1f} TFLOP/s, "
      "fp8 8192^3 GEMM {:.1f} TFLOP/s\n",
      ceil.copy_bytes_per_s / 1e12, ceil.bf16_flops_per_s / 1e12, ceil.fp8_flops_per_s / 1e12);
  std::cout << fmt::format("{:<14} {:>6} {:<13} {:>10} {:>10} {:>8} {:>9} {:>10} {:>8} {:>9}\n",
                           "shape", "tokens", "backend", "median_us", "p90_us", "TB/s", "TFLOP/s",
                           "floor_us", "%floor", "check");
  const std::vector<MoEBenchPoint> points = run_moe_bench(o, ceil, [](const MoEBenchPoint& p) {
    std::cout << fmt::format(
        "{:<14} {:>6} {:<13} {:>10.1f} {:>10.1f} {:>8.3f} {:>9.1f} {:>10.1f} {:>7.1f}% {:>9}\n",
        p.shape, p.tokens, p.backend, p.median_us, p.p90_us, p.tb_per_s(), p.tflop_per_s(),
        p.floor_us, p.pct_of_floor(),
        p.check_error < 0 ? std::string("-")
                          : fmt::format("{}{:.1e}", p.check_failed ? "FAIL " : "", p.check_error));
    std::cout.flush();
  });
  if (!a.json.empty() || !a.png.empty()) {
    nlohmann::json j;
    j["ceilings"] = {{"copy_bytes_per_s", ceil.copy_bytes_per_s},
                     {"bf16_flops_per_s", ceil.bf16_flops_per_s},
                     {"fp8_flops_per_s", ceil.fp8_flops_per_s}};
    j["dtype"] = a.dtype;
    j["quant"] = a.quant;
    j["sets"] = a.sets;
    for (const MoEBenchPoint& p : points) {
      j["points"].push_back({{"shape", p.shape},
                             {"backend", p.backend},
                             {"tokens", p.tokens},
                             {"median_us", p.median_us},
                             {"p10_us", p.p10_us},
                             {"p90_us", p.p90_us},
                             {"reps", p.reps},
                             {"bytes", p.bytes},
                             {"flops", p.flops},
                             {"floor_us", p.floor_us},
                             {"pct_of_floor", p.pct_of_floor()},
                             {"tb_per_s", p.tb_per_s()},
                             {"tflop_per_s", p.tflop_per_s()},
                             {"check_error", p.check_error},
                             {"check_failed", p.check_failed}});
    }
    if (!a.json.empty()) {
      write_file_atomically(a.json, j.dump(1) + "\n", "--json");
      std::cout << "results written to " << a.json << "\n";
    }
    if (!a.png.empty()) {
      plot_moe_bench(j, a.png);
      std::cout << "plot written to " << a.png << "\n";
    }
  }
  const auto failed = std::count_if(points.begin(), points.end(),
                                    [](const MoEBenchPoint& p) { return p.check_failed; });
  if (failed > 0) {
    std::cerr << fmt::format(
        "bench moe: {} point(s) FAILED the check against the fp64 reference (normalised error "
        "above {:.0e})\n",
        failed, moe_bench_check_tolerance(o.dtype, o.quant));
    return 1;
  }
  return 0;
}

#else

int bench_moe(const BenchMoeArgs&) {
  MG_FAIL("bench moe times the CUDA expert backends: this moegraph was built without CUDA");
}

#endif  // MG_WITH_CUDA

struct BenchPlotArgs {
  std::string json;
  std::string png;
};

int bench_plot(const BenchPlotArgs& a) {
  check_output_path(a.png, "--png");
  plot_moe_bench(load_json_file(a.json), a.png);
  std::cout << "plot written to " << a.png << "\n";
  return 0;
}

struct BenchE2eArgs {
  std::string model;
  std::string device = "cuda";
  std::string dtype;
  int prompt_tokens = 512;
  int decode_tokens = 128;
  int repeats = 3;
  bool cuda_graph = false;
  bool no_fuse = false;
  std::optional<uint64_t> random_weights;
  int tp = 1;
  bool ep = false;
};

// The floor of one sequence's prefill (tools/bench/decode_floor.h): its weight bytes over the
// copy bandwidth or its flops over the GEMM rate, whichever is longer, and `prefill` tokens/s as a
// share of it. Without a measured GEMM rate (the CPU) only the bytes bound is printed.
void print_prefill_floor(const PrefillWork& work, int64_t tokens, const DeviceCeilings& ceil,
                         double prefill) {
  const double bytes_s = work.bytes / ceil.copy_bytes_per_s;
  if (ceil.gemm_flops_per_s <= 0) {
    std::cout << fmt::format(
        "prefill floor: {:.3f} GB of weights over {:.0f} GB/s: {:.1f} tokens/s (bytes only: the "
        "GEMM rate is measured on GPUs); prefill at {:.1f}% of it\n",
        work.bytes / 1e9, ceil.copy_bytes_per_s / 1e9, tokens / bytes_s,
        100.0 * prefill * bytes_s / tokens);
    return;
  }
  const double flops_s = work.flops / ceil.gemm_flops_per_s;
  const double floor_s = std::max(bytes_s, flops_s);
  const double uniform_s = std::max(work.bytes_uniform / ceil.copy_bytes_per_s, flops_s);
  std::cout << fmt::format(
      "prefill floor: {:.3f} GB of weights (dense + top-k experts a layer) over {:.0f} GB/s "
      "({:.3f} ms) or {:.2f} TFLOP over the measured {:.1f} TFLOP/s GEMM rate ({:.3f} ms): {:.1f} "
      "tokens/s, {}-bound\n",
      work.bytes / 1e9, ceil.copy_bytes_per_s / 1e9, bytes_s * 1e3, work.flops / 1e12,
      ceil.gemm_flops_per_s / 1e12, flops_s * 1e3, tokens / floor_s,
      flops_s > bytes_s ? "compute" : "bandwidth");
  std::cout << fmt::format("prefill at {:.1f}% of its floor\n", 100.0 * prefill * floor_s / tokens);
  std::cout << fmt::format(
      "prefill under uniform routing (not a bound: {:.3f} GB, the experts expected to get a "
      "token): {:.1f} tokens/s, prefill at {:.1f}% of it\n",
      work.bytes_uniform / 1e9, tokens / uniform_s, 100.0 * prefill * uniform_s / tokens);
}

// The weight-bandwidth floor of batch-1 decode (tools/bench/decode_floor.h) and `decode`
// tokens/s as a share of it.
void print_decode_floor(const DecodeWeightBytes& bytes, double bandwidth, double decode) {
  const double floor_tokens = bandwidth / bytes.total();
  std::cout << fmt::format(
      "floor: {:.3f} MB of weights per decode token ({:.3f} MB dense, {:.3f} MB of routed "
      "experts at top-k of each layer's experts; {:.3f} MB of it quantized codes and scales at "
      "their packed bytes), copy bandwidth {:.0f} GB/s: {:.1f} tokens/s\n",
      bytes.total() / 1e6, bytes.dense / 1e6, bytes.experts / 1e6, bytes.quantized / 1e6,
      bandwidth / 1e9, floor_tokens);
  std::cout << fmt::format("decode at {:.1f}% of the weight-bandwidth floor\n",
                           100.0 * decode / floor_tokens);
}

int bench_e2e(const BenchE2eArgs& a) {
  MG_CHECK(a.prompt_tokens > 0 && a.decode_tokens > 0 && a.repeats > 0,
           "bench e2e: --prompt-tokens, --decode-tokens and --repeats must be positive");
  const std::filesystem::path graph = resolve_model(a.model);
  CompileOptions compile;
  compile.device = Device::parse(a.device);
  if (!a.dtype.empty()) {
    MG_CHECK(a.dtype == "bf16" || a.dtype == "f16" || a.dtype == "f32",
             "--dtype: expected bf16, f16 or f32, got '{}'", a.dtype);
    compile.activation_dtype =
        a.dtype == "bf16" ? DType::kBF16 : (a.dtype == "f16" ? DType::kF16 : DType::kF32);
  }
  compile.max_seq_len = a.prompt_tokens + a.decode_tokens + 1;
  compile.max_tokens = std::min(a.prompt_tokens, 2048);
  compile.random_weights = a.random_weights;
  compile.fuse_ops = !a.no_fuse;
  SessionOptions options;
  options.threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  options.cuda_graph = a.cuda_graph;
  // Every rank runs the same prompt and steps (the MoE collectives stay in lockstep); rank 0
  // prints.
  // Returns the median prefill and decode tokens/s.
  struct Rates {
    double prefill, decode;
  };
  auto measure = [&](Session& session, bool print, const std::string& where) -> Rates {
    const int64_t vocab = session.plan().info.vocab_size();
    std::vector<int32_t> prompt(a.prompt_tokens);
    for (int i = 0; i < a.prompt_tokens; ++i) prompt[i] = static_cast<int32_t>((i * 7919) % vocab);
    GenerateOptions gen;
    gen.max_new_tokens = a.decode_tokens + 1;  // one token from the prefill, then decode steps
    gen.stop_at_eos = false;
    std::vector<double> prefill, decode;
    for (int r = 0; r <= a.repeats; ++r) {  // the first run warms up (plans, caches)
      const GenerateResult res = session.generate(prompt, gen);
      if (r == 0) continue;
      prefill.push_back(res.prompt_tokens / res.prefill_seconds);
      decode.push_back((res.tokens.size() - 1) / res.decode_seconds);
    }
    std::sort(prefill.begin(), prefill.end());
    std::sort(decode.begin(), decode.end());
    const Rates rates{prefill[prefill.size() / 2], decode[decode.size() / 2]};
    if (!print) return rates;
    std::cout << fmt::format(
        "model: {} on {} ({}{}{}{})\n", session.plan().model_name, where,
        dtype_name(activation_dtype_of(compile)), a.cuda_graph ? ", decode as a CUDA graph" : "",
        a.no_fuse ? ", fuse-ops pass off" : "", a.random_weights ? ", random weights" : "");
    std::cout << fmt::format("prefill: {} tokens, median {:.1f} tokens/s over {} runs\n",
                             a.prompt_tokens, prefill[prefill.size() / 2], a.repeats);
    std::cout << fmt::format("decode: {} tokens (batch 1), median {:.1f} tokens/s over {} runs\n",
                             a.decode_tokens, decode[decode.size() / 2], a.repeats);
    return rates;
  };
  // --tp/--ep: CPU ranks are threads, GPU ranks processes (--nproc-per-node or a launcher).
  std::optional<LaunchEnv> launch = LaunchEnv::from_environment(kMaxRanks);
  if (launch && launch->world_size == 1 && !compile.device.is_cuda()) launch.reset();
  if (a.tp > 1 || a.ep || launch) {
    MG_CHECK(a.tp > 1 || !a.ep, "--ep needs more than one rank (--tp > 1)");
    const LocalRanksOptions ranks{a.tp, 1, a.ep, MoEDispatch::kAllGatherReduceScatter};
    const std::string where =
        fmt::format("{} {} ranks (tp={}{})", a.tp, compile.device.is_cuda() ? "GPU" : "cpu", a.tp,
                    a.ep ? ", ep" : "");
    auto rank = [&](const ParallelConfig& pc, Session& s) {
      measure(s, pc.world_rank() == 0, where);
    };
    if (launch) {
      run_process_rank(graph, compile, options, ranks, *launch,
                       fmt::format("bench e2e prompt={} decode={} repeats={}", a.prompt_tokens,
                                   a.decode_tokens, a.repeats),
                       rank);
    } else {
      MG_CHECK(compile.device.is_cpu(),
               "--tp on {}: GPU ranks are processes, one per GPU; start them with "
               "--nproc-per-node {} (or torchrun-style RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT)",
               compile.device.str(), a.tp);
      options.threads = std::max(1, options.threads / a.tp);
      run_local_ranks(graph, compile, options, ranks, rank);
    }
    return 0;
  }
  // Measured before the weights take the device's memory (the copy needs 2 GiB of it).
  DeviceCeilings ceil = measure_device_ceilings(compile.device);
  // The GEMM rate is the 16-bit tensor cores'; F32 models get the bytes bound only.
  if (activation_dtype_of(compile) == DType::kF32) ceil.gemm_flops_per_s = 0;
  auto session = Session::open(graph, compile, options);
  const Rates rates = measure(*session, true, compile.device.str());
  const proto::Model model = load_graph(graph);
  const DType dtype = activation_dtype_of(compile);
  print_prefill_floor(prefill_work(model, dtype, a.prompt_tokens), a.prompt_tokens, ceil,
                      rates.prefill);
  print_decode_floor(decode_weight_bytes(model, dtype), ceil.copy_bytes_per_s, rates.decode);
  return 0;
}

struct BenchSoakArgs {
  std::string model;
  std::string device = "cpu";
  std::string dtype;
  int64_t steps = 10000;
  int window = 128;
  bool cuda_graph = false;
  double max_host_growth_mib = 8;
  double max_device_growth_mib = 2;
  int64_t leak_bytes_per_step = 0;  // test hook: proves the check catches a leak
};

std::string memory_line(const MemoryUsage& m) {
  std::string s = fmt::format("host RSS {:.1f} MiB", m.host_rss_bytes / 1048576.0);
  if (m.device_used_bytes) {
    s += fmt::format(", device used {:.1f} MiB", *m.device_used_bytes / 1048576.0);
  }
  return s;
}

// Decode steps of one model, one token at a time, with memory read after a warm-up and at the
// end: a leak per step (host or device) shows as growth. Positions cycle through a window of the
// KV cache (a new sequence starts at 0 each time round), so any number of steps fits.
int bench_soak(const BenchSoakArgs& a) {
  MG_CHECK(a.steps > 0 && a.window >= 2, "bench soak: --steps must be positive, --window >= 2");
  const std::filesystem::path graph = resolve_model(a.model);
  CompileOptions compile;
  compile.device = Device::parse(a.device);
  if (!a.dtype.empty()) {
    MG_CHECK(a.dtype == "bf16" || a.dtype == "f16" || a.dtype == "f32",
             "--dtype: expected bf16, f16 or f32, got '{}'", a.dtype);
    compile.activation_dtype =
        a.dtype == "bf16" ? DType::kBF16 : (a.dtype == "f16" ? DType::kF16 : DType::kF32);
  }
  compile.max_seq_len = a.window;
  compile.max_tokens = 8;
  SessionOptions options;
  options.threads = 2;
  options.cuda_graph = a.cuda_graph;
  auto session = Session::open(graph, compile, options);
  const int64_t vocab = session->plan().info.vocab_size();
  int32_t token = 1;
  std::vector<std::unique_ptr<char[]>> leaked;
  auto step = [&](int64_t i) {
    const int32_t pos = static_cast<int32_t>(i % a.window);
    const Tensor& logits =
        session->forward(std::span(&token, 1), std::span(&pos, 1), Session::Logits::kLastRow);
    const float* row = logits.data<float>();
    token = static_cast<int32_t>(std::max_element(row, row + vocab) - row);  // greedy
    if (a.leak_bytes_per_step > 0) {
      leaked.emplace_back(new char[a.leak_bytes_per_step]);
      std::fill_n(leaked.back().get(), a.leak_bytes_per_step, 1);  // resident, not just mapped
    }
  };
  // Warm-up: twice round the window, so every plan, cache and pool block exists.
  const int64_t warmup = 2 * static_cast<int64_t>(a.window);
  for (int64_t i = 0; i < warmup; ++i) step(i);
  const MemoryUsage start = memory_usage(compile.device);
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < a.steps; ++i) step(warmup + i);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const MemoryUsage end = memory_usage(compile.device);
  std::cout << fmt::format(
      "model: {} on {} ({}{}), {} decode steps after {} warm-up steps, "
      "{:.1f} steps/s\n",
      session->plan().model_name, compile.device.str(), dtype_name(activation_dtype_of(compile)),
      a.cuda_graph ? ", decode as a CUDA graph" : "", a.steps, warmup, a.steps / seconds);
  std::cout << "memory at start: " << memory_line(start) << "\n";
  std::cout << "memory at end:   " << memory_line(end) << "\n";
  const double host_growth = (end.host_rss_bytes - start.host_rss_bytes) / 1048576.0;
  const double device_growth =
      end.device_used_bytes ? (*end.device_used_bytes - *start.device_used_bytes) / 1048576.0 : 0;
  std::cout << fmt::format("growth: host {:+.1f} MiB (limit {}), device {:+.1f} MiB (limit {})\n",
                           host_growth, a.max_host_growth_mib, device_growth,
                           a.max_device_growth_mib);
  if (host_growth > a.max_host_growth_mib || device_growth > a.max_device_growth_mib) {
    std::cerr << "bench soak: memory grew over the decode steps (a leak?)\n";
    return 1;
  }
  return 0;
}

struct BenchGemvArgs {
  std::string rows = "1,2,4,8,16";
  std::string dtype = "bf16";
  int64_t in = 0, out = 0;
};

int bench_gemv(const BenchGemvArgs& a) {
#ifdef MG_WITH_CUDA
  MG_CHECK(cuda_device_count() > 0,
           "bench gemv times CUDA kernels and this machine has no CUDA GPU; run it on a machine "
           "with one");
  GemvBenchOptions o;
  MG_CHECK(a.dtype == "bf16" || a.dtype == "f16" || a.dtype == "f32",
           "bench gemv: --dtype must be bf16, f16 or f32, got '{}'", a.dtype);
  o.dtype = a.dtype == "bf16" ? DType::kBF16 : a.dtype == "f16" ? DType::kF16 : DType::kF32;
  MG_CHECK((a.in > 0) == (a.out > 0), "bench gemv: a custom shape needs both --in and --out");
  if (a.in > 0) o.shapes.push_back({fmt::format("{}x{}", a.in, a.out), a.in, a.out});
  o.rows.clear();
  for (const std::string& r : split_list(a.rows)) {
    const int64_t rows = std::stoll(r);
    MG_CHECK(rows >= 1 && rows <= 4096, "bench gemv: --rows must be 1..4096, got {}", r);
    o.rows.push_back(rows);
  }
  MG_CHECK(!o.rows.empty(), "bench gemv: --rows is empty");
  return run_gemv_bench(o);
#else
  (void)a;
  MG_CHECK(false, "bench gemv times CUDA kernels; this build has no CUDA (MG_CUDA=OFF)");
  return 1;
#endif
}

}  // namespace

Command add_bench_command(CLI::App& app) {
  CLI::App* cmd =
      app.add_subcommand("bench", "Benchmarks: one MoE layer, a whole model, a memory soak");
  cmd->require_subcommand(1);

  auto moe = std::make_shared<BenchMoeArgs>();
  CLI::App* m = cmd->add_subcommand("moe", "Time one MoE layer per CUDA expert backend");
  m->add_option("--shape", moe->shapes,
                "Named shapes, comma-separated: all, mixtral, qwen3-30b-a3b, deepseek-v3, "
                "gpt-oss-120b")
      ->capture_default_str();
  m->add_option("--hidden", moe->hidden, "Custom shape: hidden size")->check(int_range(1, 65536));
  m->add_option("--inter", moe->inter, "Custom shape: expert intermediate size")
      ->check(int_range(1, 1 << 20));
  m->add_option("--experts", moe->experts, "Custom shape: experts")->check(int_range(1, 4096));
  m->add_option("--topk", moe->topk, "Custom shape: experts per token")->check(int_range(1, 4096));
  m->add_option("--tokens", moe->tokens, "Token counts, comma-separated")->capture_default_str();
  m->add_option("--backend", moe->backends, "all, or backend names, comma-separated")
      ->capture_default_str();
  m->add_option("--kernel", moe->kernels,
                "cuda_moe kernels to time, comma-separated (each as backend cuda_moe:KERNEL; "
                "--backend then defaults to none): auto, decode, cublas, grouped, grouped_K or "
                "grouped_K1+K2 with K one of mma16, mma32, mma64, mma128, wgmma, tma, ffma; with "
                "--quant the quantized backend's kernels, e.g. wna16_mma16 for cuda_wna16");
  m->add_option("--dtype", moe->dtype, "bf16 or f16")->capture_default_str();
  std::vector<std::string> quant_names = {"none",       "fp8-block", "fp8-channel",
                                          "fp8-tensor", "mxfp4",     "nvfp4"};
  for (const std::string& name : int_quant_names()) quant_names.push_back(name);
  m->add_option("--quant", moe->quant,
                "Expert weights: none (the dtype), or FP8 E4M3 W8A8 with 128x128 block "
                "(fp8-block), per-row (fp8-channel) or per-matrix (fp8-tensor) scales, timed on "
                "cuda_fp8; the floor then counts the FP8 bytes and the measured FP8 GEMM rate; "
                "or FP4 weight-only mxfp4 / nvfp4, timed on cuda_fp4 (the floor on the packed "
                "codes and one byte per scale); or weight-only integer codes (W4A16 / W8A16) as "
                "make-model names them, int4-g32|g64|g128|channel, uint4-... (zero points), "
                "int8-..., uint8-..., timed on cuda_wna16 (the floor on the packed codes, 16-bit "
                "scales and packed zero points)")
      ->capture_default_str()
      ->check(CLI::IsMember(quant_names));
  m->add_option("--sets", moe->sets, "Input sets rotated between calls")
      ->capture_default_str()
      ->check(int_range(1, 64));
  m->add_option("--target-ms", moe->target_ms, "Timed calls fill about this long (5..400 calls)")
      ->capture_default_str();
  m->add_flag("--no-check", moe->no_check,
              "Skip checking each point against the fp64 reference layer on sampled rows");
  m->add_option("--json", moe->json, "Write the results as JSON here");
  m->add_option("--png", moe->png, "Draw % of the floor vs tokens per shape and backend here");

  auto plot = std::make_shared<BenchPlotArgs>();
  CLI::App* p = cmd->add_subcommand("plot", "Draw the PNG of a `bench moe --json` file");
  p->add_option("json", plot->json, "Results of bench moe --json")->required();
  p->add_option("--png", plot->png, "Output PNG")->required();

  auto e2e = std::make_shared<BenchE2eArgs>();
  CLI::App* e = cmd->add_subcommand("e2e", "Prefill and decode tokens/s of a model");
  e->add_option("model", e2e->model, "Model directory or graph file (default: bundled model)");
  e->add_option("--device", e2e->device, "cpu, cuda or cuda:N")->capture_default_str();
  e->add_option("--dtype", e2e->dtype, "Activation dtype: bf16, f16 or f32");
  // prompt + decode + 1 is the KV-cache length: each at most half of kMaxSeqLen.
  e->add_option("--prompt-tokens", e2e->prompt_tokens, "Prompt length")
      ->capture_default_str()
      ->check(int_range(1, kMaxSeqLen / 2));
  e->add_option("--decode-tokens", e2e->decode_tokens, "Generated tokens after the first")
      ->capture_default_str()
      ->check(int_range(1, kMaxSeqLen / 2));
  e->add_option("--repeats", e2e->repeats, "Timed runs (after one warm-up run)")
      ->capture_default_str()
      ->check(int_range(1, 1000));
  e->add_flag("--cuda-graph", e2e->cuda_graph, "Replay the decode step as a CUDA graph");
  e->add_flag("--no-fuse", e2e->no_fuse,
              "Run the graph as written: no fuse-ops compile pass (add + rms_norm fusion)");
  e->add_option("--random-weights", e2e->random_weights,
                "Fill the weights with random values from this seed instead of reading them "
                "(for graphs written by make-model --graph-only)")
      ->check(non_negative_u64());
  e->add_option("--tp", e2e->tp,
                "Tensor-parallel ranks (CPU: threads; CUDA: one process per GPU, started with "
                "--nproc-per-node or a launcher)")
      ->capture_default_str()
      ->check(int_range(1, kMaxRanks));
  e->add_flag("--ep", e2e->ep, "Expert parallelism over the --tp ranks (whole experts per rank)");

  auto serve = std::make_shared<BenchServeArgs>();
  CLI::App* sv = cmd->add_subcommand(
      "serve", "Batched generation (Engine): tokens/s and per-token latency per batch size");
  sv->add_option("model", serve->model, "Model directory or graph file (default: bundled model)");
  sv->add_option("--device", serve->device, "cpu, cuda or cuda:N")->capture_default_str();
  sv->add_option("--dtype", serve->dtype, "Activation dtype: bf16, f16 or f32");
  sv->add_option("--batch", serve->batches, "Concurrent sequences, comma-separated")
      ->capture_default_str();
  sv->add_option("--prompt-tokens", serve->prompt_tokens, "Prompt length of every sequence")
      ->capture_default_str()
      ->check(int_range(1, kMaxSeqLen / 2));
  sv->add_option("--decode-tokens", serve->decode_tokens, "Tokens generated per sequence")
      ->capture_default_str()
      ->check(int_range(2, kMaxSeqLen / 2));
  sv->add_option("--temperature", serve->temperature,
                 "0: greedy (picked on the GPU); otherwise sampled on the host")
      ->capture_default_str()
      ->check(CLI::Range(0.0f, 100.0f));
  sv->add_flag("--cuda-graph", serve->cuda_graph,
               "Replay each decode step as a CUDA graph (one per batch size)");
  sv->add_option("--random-weights", serve->random_weights,
                 "Fill the weights with random values from this seed instead of reading them "
                 "(for graphs written by make-model --graph-only)")
      ->check(non_negative_u64());

  auto soak = std::make_shared<BenchSoakArgs>();
  CLI::App* k =
      cmd->add_subcommand("soak", "Many decode steps of a model; fails when memory grows");
  k->add_option("model", soak->model, "Model directory or graph file (default: bundled model)");
  k->add_option("--device", soak->device, "cpu, cuda or cuda:N")->capture_default_str();
  k->add_option("--dtype", soak->dtype, "Activation dtype: bf16, f16 or f32");
  k->add_option("--steps", soak->steps, "Decode steps measured (after the warm-up)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  k->add_option("--window", soak->window, "Positions cycle through this many KV-cache slots")
      ->capture_default_str()
      ->check(int_range(2, kMaxSeqLen));
  k->add_flag("--cuda-graph", soak->cuda_graph, "Replay the decode step as a CUDA graph");
  k->add_option("--max-host-growth-mib", soak->max_host_growth_mib,
                "Fail when host RSS grows more than this over the steps")
      ->capture_default_str();
  k->add_option("--max-device-growth-mib", soak->max_device_growth_mib,
                "Fail when GPU memory in use grows more than this over the steps")
      ->capture_default_str();
  k->add_option("--leak-bytes-per-step", soak->leak_bytes_per_step,
                "Testing: leak this many host bytes per step (the check must then fail)")
      ->group("");  // hidden

  auto gemv = std::make_shared<BenchGemvArgs>();
  CLI::App* g = cmd->add_subcommand(
      "gemv", "Time linear's GEMV path against cuBLASLt on the decode step's projections");
  g->add_option("--rows", gemv->rows, "Rows of x, comma-separated")->capture_default_str();
  g->add_option("--dtype", gemv->dtype, "bf16, f16 or f32")->capture_default_str();
  g->add_option("--in", gemv->in, "Custom shape: input features")->check(int_range(1, 1 << 20));
  g->add_option("--out", gemv->out, "Custom shape: output features")->check(int_range(1, 1 << 24));

  return [m, e, p, k, g, sv, moe, e2e, plot, soak, gemv, serve] {
    if (m->parsed()) return bench_moe(*moe);
    if (g->parsed()) return bench_gemv(*gemv);
    if (p->parsed()) return bench_plot(*plot);
    if (e->parsed()) return bench_e2e(*e2e);
    if (sv->parsed()) return bench_serve(*serve);
    if (k->parsed()) return bench_soak(*soak);
    return 2;
  };
}

}  // namespace mg::cli
