#include "framework/runtime/session.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "framework/compile/compiler.h"
#include "framework/core/finite.h"
#include "framework/core/logging.h"
#include "framework/device/allocator.h"
#include "framework/device/convert.h"
#ifdef MG_WITH_CUDA
#include "framework/device/cuda/argmax_cuda.h"
#include "framework/device/cuda/cuda_device.h"
#include "framework/runtime/cuda/cuda_graph.h"
#else
namespace mg {
// Never constructed without CUDA; complete so that the unique_ptr member compiles.
class CudaGraph {};
}  // namespace mg
#endif

namespace mg {

namespace {
double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}
}  // namespace

Session::Session(std::shared_ptr<const ExecutionPlan> plan, SessionOptions options,
                 Communicator* comm)
    : plan_(std::move(plan)), options_(options), comm_(comm) {
  const ExecutionPlan& p = *plan_;
  MG_CHECK(p.token_ids >= 0 && p.positions >= 0 && p.logits >= 0,
           "model '{}' is not a decoder graph: it needs inputs 'token_ids', 'positions' and an "
           "output 'logits'",
           p.model_name);
  MG_CHECK(options_.threads >= 1, "threads must be >= 1, got {}", options_.threads);
  const DeviceScope on_device(p.device);
  pool_ = std::make_unique<ThreadPool>(options_.threads);
  stream_ = make_stream(p.device);
  profiler_.set_enabled(options_.profile);

  // Every allocation below is sized by --max-tokens or --max-seq-len (or the graph's
  // info.max_seq_len); the errors say which, since the allocator only sees a shape.
  auto sized_by = [&](const char* what, const char* knob, int64_t value, auto&& allocate) {
    try {
      allocate();
    } catch (const Error& e) {
      throw Error(fmt::format("{} for {} {}: {}", what, knob, value, e.what()));
    }
  };
  const char* kMaxTokensKnob = "max_tokens (--max-tokens)";
  const char* kMaxSeqLenKnob = "max_seq_len (--max-seq-len or the graph's info.max_seq_len)";
  sized_by("activation arena", kMaxTokensKnob, p.max_tokens, [&] {
    arena_ =
        empty_tensor(p.device, DType::kU8,
                     {static_cast<int64_t>(std::max<size_t>(p.arena_bytes, 1))}, stream_.get());
  });
  sized_by("workspace", kMaxTokensKnob, p.max_tokens, [&] {
    workspace_ =
        empty_tensor(p.device, DType::kU8,
                     {static_cast<int64_t>(std::max<size_t>(p.workspace_bytes, 1))}, stream_.get());
  });
  const PlanValue& logits = p.values[p.logits];
  if (logits.type.dtype != DType::kF32) {
    logits_f32_device_ = empty_tensor(p.device, DType::kF32,
                                      {p.max_tokens, logits.type.shape.back()}, stream_.get());
  }
  host_ids_ = Tensor::empty_cpu(DType::kI32, {p.max_tokens});
  host_positions_ = Tensor::empty_cpu(DType::kI32, {p.max_tokens});

  // Argument views: activations point into the arena (rows set per call), weights are the
  // placed tensors.
  auto view_of = [&](int v) -> Tensor {
    if (v < 0) return Tensor();
    const PlanValue& pv = p.values[v];
    if (pv.source == ValueSource::kWeight) return pv.weight;
    Shape shape = pv.type.shape;
    for (int64_t& d : shape) {
      if (d == kTokens) d = p.max_tokens;
    }
    return Tensor(arena_.buffer(), pv.type.dtype, std::move(shape), pv.arena_offset);
  };
  // Paged KV cache (Engine): sequence slots and a pool of blocks instead of one contiguous cache.
  MG_CHECK(options_.max_sequences >= 1 && options_.max_sequences <= 4096,
           "max_sequences must be in [1, 4096], got {}", options_.max_sequences);
  StateOptions state_options{p.device, p.max_seq_len};
  if (paged()) {
    MG_CHECK(options_.kv_block_size >= 1 && options_.kv_block_size <= 4096,
             "kv_block_size must be in [1, 4096], got {}", options_.kv_block_size);
    MG_CHECK(options_.kv_blocks <= (int64_t{1} << 30), "kv_blocks {} is more than 2^30",
             options_.kv_blocks);
    max_blocks_per_seq_ = (p.max_seq_len + options_.kv_block_size - 1) / options_.kv_block_size;
    state_options.kv_blocks = options_.kv_blocks;
    state_options.kv_block_size = options_.kv_block_size;
    const int64_t slots = options_.max_sequences;
    host_slots_ = Tensor::empty_cpu(DType::kI32, {p.max_tokens});
    host_block_tables_ = Tensor::empty_cpu(DType::kI32, {slots, max_blocks_per_seq_});
    std::fill_n(host_block_tables_.data<int32_t>(), slots * max_blocks_per_seq_, -1);
    row_slots_ = empty_tensor(p.device, DType::kI32, {p.max_tokens}, stream_.get());
    block_tables_ =
        empty_tensor(p.device, DType::kI32, {slots, max_blocks_per_seq_}, stream_.get());
    copy_tensor(block_tables_, host_block_tables_, stream_.get());
    kv_.row_slots = row_slots_.data<int32_t>();
    kv_.block_tables = block_tables_.data<int32_t>();
    kv_.max_blocks_per_seq = max_blocks_per_seq_;
    kv_.block_size = options_.kv_block_size;
    kv_.num_blocks = options_.kv_blocks;
  } else {
    MG_CHECK(options_.max_sequences == 1, "max_sequences {} needs a paged KV cache (kv_blocks > 0)",
             options_.max_sequences);
  }
  for (const PlanNode& node : p.nodes) {
    std::vector<Tensor> ins, outs;
    for (int v : node.inputs) ins.push_back(view_of(v));
    for (int v : node.outputs) outs.push_back(view_of(v));
    node_inputs_.push_back(std::move(ins));
    node_outputs_.push_back(std::move(outs));
    // Per-node state is the attention KV cache, [max_seq_len, kv_heads, head_dim] per layer.
    if (paged()) {
      sized_by(fmt::format("state (KV cache) of node '{}'", node.name).c_str(),
               "kv_blocks (--kv-blocks)", options_.kv_blocks,
               [&] { states_.push_back(node.kernel->create_state(state_options)); });
    } else {
      sized_by(fmt::format("state (KV cache) of node '{}'", node.name).c_str(), kMaxSeqLenKnob,
               p.max_seq_len, [&] { states_.push_back(node.kernel->create_state(state_options)); });
    }
  }

  if (options_.cuda_graph) {
    MG_CHECK(p.device.is_cuda(), "--cuda-graph needs a CUDA device, not {}", p.device.str());
    MG_CHECK(!options_.profile,
             "--cuda-graph and --profile do not mix: the profile times each node on the host");
    for (const PlanNode& node : p.nodes) {
      MG_CHECK(node.kernel->graph_capturable(),
               "--cuda-graph: node '{}' ({}: {}) synchronises with the host and cannot be "
               "captured; choose another backend",
               node.name, node.op,
               node.kernel->describe().substr(0, node.kernel->describe().find('\n')));
    }
    // One row per sequence: the decode steps; prefill chunks run uncaptured.
    graph_max_rows_ = std::min<int64_t>(options_.max_sequences, p.max_tokens);
  }
}

Session::~Session() = default;

std::unique_ptr<Session> Session::open(const std::filesystem::path& graph_file,
                                       const CompileOptions& compile, SessionOptions options) {
  std::shared_ptr<const ExecutionPlan> plan = compile_graph_file(graph_file, compile);
  return std::make_unique<Session>(std::move(plan), options);
}

void Session::upload_and_run(const int32_t* token_ids, const int32_t* positions,
                             const int32_t* slots, int64_t tokens) {
  const ExecutionPlan& p = *plan_;
  std::memcpy(host_ids_.raw(), token_ids, tokens * sizeof(int32_t));
  std::memcpy(host_positions_.raw(), positions, tokens * sizeof(int32_t));
  Tensor ids_src = host_ids_.slice_rows(0, tokens);
  Tensor pos_src = host_positions_.slice_rows(0, tokens);
  Tensor ids_dst(arena_.buffer(), DType::kI32, {tokens}, p.values[p.token_ids].arena_offset);
  Tensor pos_dst(arena_.buffer(), DType::kI32, {tokens}, p.values[p.positions].arena_offset);
  copy_tensor(ids_dst, ids_src, stream_.get());
  copy_tensor(pos_dst, pos_src, stream_.get());
  if (paged()) {
    MG_ASSERT(slots != nullptr, "a paged forward without sequence slots");
    std::memcpy(host_slots_.raw(), slots, tokens * sizeof(int32_t));
    copy_tensor(row_slots_.slice_rows(0, tokens), host_slots_.slice_rows(0, tokens), stream_.get());
    // The batch's make-up for the attention kernels' choice (kv_batch.h). A forward captured in a
    // CUDA graph is replayed for later batches of its row count whatever their make-up: unknown.
    const bool captured = tokens <= graph_max_rows_;
    kv_.flash_passes = captured ? 0 : count_flash_passes(slots, tokens);
    kv_.decode_rows = captured ? 0 : count_leading_single_rows(slots, tokens);
    kv_.chunk_flash_passes =
        captured ? 0 : count_flash_passes(slots + kv_.decode_rows, tokens - kv_.decode_rows);
    for (int slot : dirty_slots_) {
      copy_tensor(block_tables_.slice_rows(slot, slot + 1),
                  host_block_tables_.slice_rows(slot, slot + 1), stream_.get());
    }
    dirty_slots_.clear();
  }

#ifdef MG_WITH_CUDA
  if (tokens <= graph_max_rows_) {
    std::unique_ptr<CudaGraph>& graph = graphs_[tokens];
    if (!graph) graph = std::make_unique<CudaGraph>();
    if (!graph->captured()) graph->capture(*stream_, [&] { run_nodes(tokens); });
    graph->launch(*stream_);
  } else {
    run_nodes(tokens);
  }
#else
  run_nodes(tokens);
#endif
}

void Session::run_chunk(const int32_t* token_ids, const int32_t* positions, int64_t tokens,
                        int64_t first_row, float* logits_out) {
  const ExecutionPlan& p = *plan_;
  upload_and_run(token_ids, positions, nullptr, tokens);

  const int64_t rows = tokens - first_row;
  if (rows == 0) return;
  const PlanValue& lv = p.values[p.logits];
  const int64_t vocab = lv.type.shape.back();
  Tensor logits_src = Tensor(arena_.buffer(), lv.type.dtype, {tokens, vocab}, lv.arena_offset)
                          .slice_rows(first_row, tokens);
  if (lv.type.dtype != DType::kF32) {
    Tensor converted = logits_f32_device_.slice_rows(0, rows);
    convert_tensor(converted, logits_src, stream_.get());
    logits_src = converted;
  }
  Tensor logits_dst = Tensor::wrap(logits_out, DType::kF32, {rows, vocab});
  copy_tensor(logits_dst, logits_src, stream_.get());
}

void Session::run_nodes(int64_t tokens) {
  const ExecutionPlan& p = *plan_;
  ExecContext ctx;
  ctx.device = p.device;
  ctx.stream = stream_.get();
  ctx.pool = pool_.get();
  ctx.workspace = workspace_.raw();
  ctx.workspace_bytes = p.workspace_bytes;
  ctx.comm = comm_;
  ctx.kv = paged() ? &kv_ : nullptr;
  const bool profile = profiler_.enabled();
  if (profile && !nodes_origin_) {
    for (size_t s = 0; s < p.nodes.size(); ++s) {
      node_events_.push_back({make_event(p.device, true), make_event(p.device, true)});
    }
    nodes_origin_ = make_event(p.device, true);
  }
  const double origin_us = profile ? profiler_.now_us() : 0.0;
  if (profile) nodes_origin_->record(*stream_);
  for (size_t s = 0; s < p.nodes.size(); ++s) {
    const PlanNode& node = p.nodes[s];
    for (size_t k = 0; k < node.inputs.size(); ++k) {
      const int v = node.inputs[k];
      if (v >= 0 && p.values[v].source != ValueSource::kWeight) node_inputs_[s][k].set_rows(tokens);
    }
    for (Tensor& t : node_outputs_[s]) t.set_rows(tokens);
    ctx.state = states_[s].get();
    if (profile) node_events_[s].begin->record(*stream_);
    node.kernel->run(ctx, node_inputs_[s], node_outputs_[s]);
    if (profile) node_events_[s].end->record(*stream_);
  }
  if (profile) {
    // One wait per forward, not per node: the nodes run back to back as they do unprofiled.
    stream_->synchronize();
    const double bookkeeping_start = profiler_.now_us();
    for (size_t s = 0; s < p.nodes.size(); ++s) {
      const NodeEvents& e = node_events_[s];
      profiler_.record(p.nodes[s].name, p.nodes[s].op,
                       origin_us + e.begin->elapsed_us_since(*nodes_origin_),
                       e.end->elapsed_us_since(*e.begin));
    }
    // Reading ~1000 events and recording them takes a millisecond or two on a large model; it
    // is left out of the forward's wall time.
    profile_bookkeeping_us_ += profiler_.now_us() - bookkeeping_start;
  }
}

const Tensor& Session::forward(std::span<const int32_t> token_ids,
                               std::span<const int32_t> positions, Logits which) {
  const ExecutionPlan& p = *plan_;
  const DeviceScope on_device(p.device);  // this thread's launches go to the plan's GPU
  MG_CHECK(!paged(),
           "forward: this session has a paged KV cache of several sequences; use forward_batch");
  MG_CHECK(token_ids.size() == positions.size(), "{} token ids but {} positions", token_ids.size(),
           positions.size());
  MG_CHECK(!token_ids.empty(), "forward needs at least one token");
  for (int32_t pos : positions) {
    MG_CHECK(pos >= 0 && pos < p.max_seq_len,
             "position {} is outside the KV cache of {} positions (max sequence length)", pos,
             p.max_seq_len);
  }
  if (!p.device.is_cpu() && p.info.vocab_size() > 0) {
    // GPU kernels read the ids on the device and cannot report a bad one without a host sync;
    // the CPU's embedding kernel checks them itself.
    for (int32_t id : token_ids) {
      MG_CHECK(id >= 0 && id < p.info.vocab_size(),
               "token id {} is outside the vocabulary of {} tokens", id, p.info.vocab_size());
    }
  }
  const int64_t total = static_cast<int64_t>(token_ids.size());
  const int64_t vocab = p.values[p.logits].type.shape.back();
  const int64_t out_rows = which == Logits::kLastRow ? 1 : total;
  if (!logits_.defined() || logits_.buffer()->size() < static_cast<size_t>(out_rows * vocab) * 4) {
    logits_ = Tensor::empty_cpu(DType::kF32, {out_rows, vocab});
  }
  logits_.set_rows(out_rows);
  profiler_.set_tokens(total);
  profile_bookkeeping_us_ = 0.0;
  const double start = profiler_.enabled() ? profiler_.now_us() : 0.0;
  for (int64_t begin = 0; begin < total; begin += p.max_tokens) {
    const int64_t n = std::min(p.max_tokens, total - begin);
    // kLastRow: only the last chunk hands back a row, its last.
    const bool all = which == Logits::kAllRows;
    const int64_t first_row = all ? 0 : (begin + n == total ? n - 1 : n);
    run_chunk(token_ids.data() + begin, positions.data() + begin, n, first_row,
              logits_.data<float>() + (all ? begin * vocab : 0));
  }
  if (profiler_.enabled()) {
    profiler_.record(fmt::format("forward T={}", total), "session", start,
                     profiler_.now_us() - start - profile_bookkeeping_us_);
  }
  return logits_;
}

void Session::set_block_table(int slot, std::span<const int32_t> blocks) {
  MG_CHECK(paged(), "set_block_table: this session has one contiguous KV cache (kv_blocks = 0)");
  MG_CHECK(slot >= 0 && slot < options_.max_sequences, "sequence slot {} outside [0, {})", slot,
           options_.max_sequences);
  MG_CHECK(static_cast<int64_t>(blocks.size()) <= max_blocks_per_seq_,
           "a block table of {} blocks; a sequence of max_seq_len {} takes at most {}",
           blocks.size(), plan_->max_seq_len, max_blocks_per_seq_);
  int32_t* row = host_block_tables_.data<int32_t>() + slot * max_blocks_per_seq_;
  for (size_t i = 0; i < blocks.size(); ++i) {
    MG_CHECK(blocks[i] >= -1 && blocks[i] < options_.kv_blocks,
             "block {} of slot {} is {}, outside the pool [0, {}) (or -1 for none)", i, slot,
             blocks[i], options_.kv_blocks);
    row[i] = blocks[i];
  }
  std::fill(row + blocks.size(), row + max_blocks_per_seq_, -1);
  if (std::find(dirty_slots_.begin(), dirty_slots_.end(), slot) == dirty_slots_.end()) {
    dirty_slots_.push_back(slot);
  }
}

const Tensor& Session::forward_batch(std::span<const int32_t> token_ids,
                                     std::span<const int32_t> positions,
                                     std::span<const int32_t> slots,
                                     std::span<const int64_t> logit_rows,
                                     std::span<const uint8_t> greedy) {
  const ExecutionPlan& p = *plan_;
  const DeviceScope on_device(p.device);
  MG_CHECK(paged(), "forward_batch needs a paged KV cache (SessionOptions::kv_blocks > 0)");
  MG_CHECK(token_ids.size() == positions.size() && token_ids.size() == slots.size(),
           "forward_batch: {} token ids, {} positions, {} slots", token_ids.size(),
           positions.size(), slots.size());
  const int64_t tokens = static_cast<int64_t>(token_ids.size());
  MG_CHECK(tokens >= 1 && tokens <= p.max_tokens,
           "forward_batch: {} rows; a batch holds 1 to max_tokens = {}", tokens, p.max_tokens);
  // CUDA kernels cannot report a bad slot, position or block without a host sync: check here.
  const int32_t* tables = host_block_tables_.data<int32_t>();
  for (int64_t t = 0; t < tokens; ++t) {
    const int32_t slot = slots[t];
    const int32_t pos = positions[t];
    MG_CHECK(slot >= 0 && slot < options_.max_sequences, "row {}: sequence slot {} outside [0, {})",
             t, slot, options_.max_sequences);
    MG_CHECK(pos >= 0 && pos < p.max_seq_len,
             "row {}: position {} is outside the KV cache of {} positions (max sequence length)", t,
             pos, p.max_seq_len);
    MG_CHECK(tables[slot * max_blocks_per_seq_ + pos / options_.kv_block_size] >= 0,
             "row {}: position {} of slot {} has no KV-cache block in its block table", t, pos,
             slot);
  }
  if (!p.device.is_cpu() && p.info.vocab_size() > 0) {
    for (int32_t id : token_ids) {
      MG_CHECK(id >= 0 && id < p.info.vocab_size(),
               "token id {} is outside the vocabulary of {} tokens", id, p.info.vocab_size());
    }
  }
  for (size_t i = 0; i < logit_rows.size(); ++i) {
    MG_CHECK(logit_rows[i] >= 0 && logit_rows[i] < tokens &&
                 (i == 0 || logit_rows[i] > logit_rows[i - 1]),
             "forward_batch: logit rows must ascend within [0, {}); row {} is {}", tokens, i,
             logit_rows[i]);
  }
  MG_CHECK(greedy.empty() || greedy.size() == logit_rows.size(),
           "forward_batch: {} greedy flags for {} logit rows", greedy.size(), logit_rows.size());
  const PlanValue& lv = p.values[p.logits];
  const int64_t vocab = lv.type.shape.back();
  const int64_t out_rows = static_cast<int64_t>(logit_rows.size());
  auto is_greedy = [&](int64_t i) { return !greedy.empty() && greedy[static_cast<size_t>(i)]; };
  greedy_picks_.assign(static_cast<size_t>(out_rows), GreedyPick{});
  if (!logits_.defined() || logits_.buffer()->size() < static_cast<size_t>(out_rows * vocab) * 4) {
    logits_ = Tensor::empty_cpu(DType::kF32, {std::max<int64_t>(out_rows, 1), vocab});
  }
  logits_.set_rows(out_rows);
  profiler_.set_tokens(tokens);
  profile_bookkeeping_us_ = 0.0;
  const double start = profiler_.enabled() ? profiler_.now_us() : 0.0;
  upload_and_run(token_ids.data(), positions.data(), slots.data(), tokens);

  // Gather the asked rows, one copy per run of consecutive rows (a decode batch is one run). On
  // a GPU they are gathered (and converted to F32) on the device, then copied back once.
  const Tensor all(arena_.buffer(), lv.type.dtype, {tokens, vocab}, lv.arena_offset);
  const bool on_host = p.device.is_cpu();
  if (!on_host && !logits_f32_device_.defined()) {
    logits_f32_device_ = empty_tensor(p.device, DType::kF32, {p.max_tokens, vocab}, stream_.get());
  }
  for (int64_t i = 0; i < out_rows;) {
    int64_t n = 1;
    while (i + n < out_rows && logit_rows[i + n] == logit_rows[i] + n) ++n;
    const Tensor src = all.slice_rows(logit_rows[i], logit_rows[i] + n);
    const Tensor dst =
        on_host ? logits_.slice_rows(i, i + n) : logits_f32_device_.slice_rows(i, i + n);
    if (src.dtype() == DType::kF32) {
      copy_tensor(dst, src, stream_.get());
    } else {
      convert_tensor(dst, src, stream_.get());
    }
    i += n;
  }
  const bool any_greedy = std::any_of(greedy.begin(), greedy.end(), [](uint8_t g) { return g; });
  if (!on_host && out_rows > 0) {
    // Only the rows sampled on the host come back (one copy per run of them).
    for (int64_t i = 0; i < out_rows;) {
      if (is_greedy(i)) {
        ++i;
        continue;
      }
      int64_t n = 1;
      while (i + n < out_rows && !is_greedy(i + n)) ++n;
      copy_tensor(logits_.slice_rows(i, i + n), logits_f32_device_.slice_rows(i, i + n),
                  stream_.get());
      i += n;
    }
    if (any_greedy) pick_greedy_on_device(out_rows, vocab);
  }
  stream_->synchronize();
  if (on_host && any_greedy) {
    for (int64_t i = 0; i < out_rows; ++i) {
      if (!is_greedy(i)) continue;
      const std::span<const float> row(logits_.data<float>() + i * vocab,
                                       static_cast<size_t>(vocab));
      GreedyPick& pick = greedy_picks_[static_cast<size_t>(i)];
      pick.first_non_finite = static_cast<int32_t>(find_non_finite(row.data(), vocab, DType::kF32));
      if (pick.first_non_finite < 0) pick.token = argmax(row);
    }
  }
  if (profiler_.enabled()) {
    profiler_.record(fmt::format("forward_batch T={}", tokens), "session", start,
                     profiler_.now_us() - start - profile_bookkeeping_us_);
  }
  return logits_;
}

void Session::pick_greedy_on_device(int64_t rows, int64_t vocab) {
#ifdef MG_WITH_CUDA
  const int64_t max_tokens = plan_->max_tokens;
  if (!picks_device_.defined()) {
    picks_device_ = empty_tensor(plan_->device, DType::kI32, {max_tokens, 2}, stream_.get());
    picks_host_ = Tensor::empty_cpu(DType::kI32, {max_tokens, 2});
  }
  cuda::argmax_rows_cuda(logits_f32_device_.data<float>(), rows, vocab,
                         picks_device_.data<int32_t>(), cuda::native(stream_.get()));
  copy_tensor(picks_host_.slice_rows(0, rows), picks_device_.slice_rows(0, rows), stream_.get());
  stream_->synchronize();
  const int32_t* picks = picks_host_.data<int32_t>();
  for (int64_t i = 0; i < rows; ++i) {
    greedy_picks_[static_cast<size_t>(i)] = GreedyPick{picks[2 * i], picks[2 * i + 1]};
  }
#else
  (void)rows;
  (void)vocab;
  MG_ASSERT(false, "greedy picks on {} in a build without CUDA", plan_->device.str());
#endif
}

Session::GreedyPick Session::greedy_step_on_device(int32_t token, int32_t position) {
  const ExecutionPlan& p = *plan_;
  const DeviceScope on_device(p.device);
  MG_ASSERT(!p.device.is_cpu() && !paged(), "greedy_step_on_device on {}", p.device.str());
  // The checks forward() makes (the position, the id: device kernels cannot report them).
  MG_CHECK(position >= 0 && position < p.max_seq_len,
           "position {} is outside the KV cache of {} positions (max sequence length)", position,
           p.max_seq_len);
  MG_CHECK(p.info.vocab_size() <= 0 || (token >= 0 && token < p.info.vocab_size()),
           "token id {} is outside the vocabulary of {} tokens", token, p.info.vocab_size());
  const PlanValue& lv = p.values[p.logits];
  const int64_t vocab = lv.type.shape.back();
  if (!logits_f32_device_.defined()) {
    logits_f32_device_ = empty_tensor(p.device, DType::kF32, {p.max_tokens, vocab}, stream_.get());
  }
  profiler_.set_tokens(1);
  profile_bookkeeping_us_ = 0.0;
  const double start = profiler_.enabled() ? profiler_.now_us() : 0.0;
  upload_and_run(&token, &position, nullptr, 1);
  const Tensor row(arena_.buffer(), lv.type.dtype, {1, vocab}, lv.arena_offset);
  if (lv.type.dtype == DType::kF32) {
    copy_tensor(logits_f32_device_.slice_rows(0, 1), row, stream_.get());
  } else {
    convert_tensor(logits_f32_device_.slice_rows(0, 1), row, stream_.get());
  }
  greedy_picks_.assign(1, GreedyPick{});
  pick_greedy_on_device(1, vocab);
  if (profiler_.enabled()) {
    profiler_.record("forward T=1", "session", start,
                     profiler_.now_us() - start - profile_bookkeeping_us_);
  }
  return greedy_picks_[0];
}

namespace {

// Samples the next token from a row of logits that must be finite: NaN compares false with
// everything, so argmax over NaN logits "chooses" token 0 and generation would go on with
// garbage and exit 0. `step` counts sampled tokens (0: the one after the prompt).
int32_t sample_finite(Sampler& sampler, std::span<const float> logits, int step, int32_t position) {
  const int64_t bad =
      find_non_finite(logits.data(), static_cast<int64_t>(logits.size()), DType::kF32);
  if (bad < 0) return sampler.sample(logits);
  const float v = logits[static_cast<size_t>(bad)];
  MG_FAIL(
      "step {} produced non-finite logits (position {}, token {}: {}); the weights may hold NaN "
      "or inf: run with --check-weights to find the tensor",
      step, position, bad, std::isnan(v) ? "NaN" : (v > 0 ? "+inf" : "-inf"));
}

}  // namespace

GenerateResult Session::generate(std::span<const int32_t> prompt, const GenerateOptions& options) {
  const ExecutionPlan& p = *plan_;
  MG_CHECK(!paged(), "generate: this session has a paged KV cache; batched generation is Engine's");
  MG_CHECK(!prompt.empty(), "the prompt is empty");
  MG_CHECK(options.max_new_tokens >= 0, "max-new-tokens must be >= 0, got {}",
           options.max_new_tokens);
  MG_CHECK(static_cast<int64_t>(prompt.size()) + options.max_new_tokens <= p.max_seq_len,
           "prompt of {} tokens + {} new tokens exceeds the maximum sequence length {}",
           prompt.size(), options.max_new_tokens, p.max_seq_len);
  Sampler sampler(options.sampling, options.seed);
  GenerateResult result;
  result.prompt_tokens = prompt.size();
  if (options.max_new_tokens == 0) return result;
  result.tokens.reserve(options.max_new_tokens);

  std::vector<int32_t> positions(prompt.size());
  for (size_t i = 0; i < positions.size(); ++i) positions[i] = static_cast<int32_t>(i);
  const int64_t vocab = p.values[p.logits].type.shape.back();
  auto t0 = std::chrono::steady_clock::now();
  const Tensor& logits = forward(prompt, positions, Logits::kLastRow);
  int32_t next = sample_finite(sampler, std::span<const float>(logits.data<float>(), vocab), 0,
                               static_cast<int32_t>(prompt.size()) - 1);
  result.prefill_seconds = seconds_since(t0);

  const int64_t eos = p.info.eos_token_id();
  // Greedy decoding on a GPU picks each next token on the device (greedy_step_on_device): the
  // same argmax and the same first non-finite id as the host's, without copying the row back.
  const bool device_greedy = !p.device.is_cpu() && options.sampling.temperature == 0.0f;
  auto t1 = std::chrono::steady_clock::now();
  int32_t pos = static_cast<int32_t>(prompt.size());
  for (;;) {
    result.tokens.push_back(next);
    if (options.on_token) options.on_token(next);
    if (static_cast<int>(result.tokens.size()) >= options.max_new_tokens) break;
    if (options.stop_at_eos &&
        ((eos >= 0 && next == eos) ||
         std::find(options.stop_token_ids.begin(), options.stop_token_ids.end(), next) !=
             options.stop_token_ids.end())) {
      break;
    }
    if (device_greedy) {
      const GreedyPick pick = greedy_step_on_device(next, pos);
      if (pick.first_non_finite < 0) {
        next = pick.token;
        ++pos;
        continue;
      }
      // A non-finite logit: fetch the row so that sample_finite names it as on the host.
      logits_.set_rows(1);
      copy_tensor(logits_.slice_rows(0, 1), logits_f32_device_.slice_rows(0, 1), stream_.get());
      stream_->synchronize();
      next = sample_finite(sampler, std::span<const float>(logits_.data<float>(), vocab),
                           static_cast<int>(result.tokens.size()), pos);
      ++pos;
      continue;
    }
    const Tensor& step =
        forward(std::span<const int32_t>(&next, 1), std::span<const int32_t>(&pos, 1));
    next = sample_finite(sampler, std::span<const float>(step.data<float>(), vocab),
                         static_cast<int>(result.tokens.size()), pos);
    ++pos;
  }
  result.decode_seconds = seconds_since(t1);
  return result;
}

}  // namespace mg
