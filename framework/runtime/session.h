// Session: runs a compiled plan. Owns the per-session state (activation arena, workspace, the KV
// caches of attention nodes) so several sessions may share one plan.
#pragma once

#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <vector>

#include "framework/compile/compile_options.h"
#include "framework/compile/execution_plan.h"
#include "framework/runtime/profiler.h"
#include "framework/runtime/sampler.h"

namespace mg {

class CudaGraph;

struct SessionOptions {
  // CPU worker threads for kernels (the calling thread included).
  int threads = 1;
  // Record per-node timings (see Profiler).
  bool profile = false;
  // CUDA devices: capture the first one-token forward (a decode step) as a CUDA graph and replay
  // it for every later one (cuda_graph.h); a paged session captures one graph per row count up
  // to max_sequences (the decode steps of a batch). Throws mg::Error at construction for a CPU
  // plan, with `profile`, or when a node cannot be captured.
  bool cuda_graph = false;
  // Paged KV cache for batched generation (Engine, forward_batch): `max_sequences` sequence slots
  // share a pool of `kv_blocks` blocks of `kv_block_size` positions (kv_batch.h). kv_blocks == 0:
  // one sequence in a contiguous cache of max_seq_len positions (forward, generate).
  int max_sequences = 1;
  int64_t kv_blocks = 0;
  int64_t kv_block_size = 16;
};

struct GenerateOptions {
  int max_new_tokens = 16;
  SamplingOptions sampling;
  uint64_t seed = 0;
  // Stop when the model's eos token (ModelInfo.eos_token_id, if >= 0) or one of
  // `stop_token_ids` (e.g. generation_config.json's eos ids) is produced.
  bool stop_at_eos = true;
  std::vector<int32_t> stop_token_ids;
  // Called with each generated token as soon as it exists (may be empty).
  std::function<void(int32_t)> on_token;
};

struct GenerateResult {
  std::vector<int32_t> tokens;  // generated ids, prompt excluded
  size_t prompt_tokens = 0;
  double prefill_seconds = 0;  // the prompt's forward and the first sample
  double decode_seconds = 0;   // every later step
};

class Session {
 public:
  // `comm` connects this session to its peers in a multi-rank run (null for one rank).
  Session(std::shared_ptr<const ExecutionPlan> plan, SessionOptions options,
          Communicator* comm = nullptr);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // Loads and compiles `graph_file`, then opens a session on it.
  static std::unique_ptr<Session> open(const std::filesystem::path& graph_file,
                                       const CompileOptions& compile, SessionOptions options);

  // Runs the decoder on `token_ids` at `positions` (same length; KV caches are written at those
  // positions). Prompts longer than the plan's max_tokens run in chunks. Returns F32 logits
  // [T, vocab] on the host (kLastRow: [1, vocab], the last token's, which is all generation
  // needs: a 512-token prompt's rows of a 152k vocabulary would be 311 MB to copy back); the
  // tensor is reused by the next call.
  enum class Logits { kAllRows, kLastRow };
  const Tensor& forward(std::span<const int32_t> token_ids, std::span<const int32_t> positions,
                        Logits logits = Logits::kAllRows);

  // Prefills `prompt` at positions 0.. and generates up to max_new_tokens tokens.
  GenerateResult generate(std::span<const int32_t> prompt, const GenerateOptions& options);

  // Paged sessions (kv_blocks > 0). Sets the block table of sequence `slot`: its position j lives
  // in block blocks[j / kv_block_size] (at most max_blocks_per_seq() blocks, each in
  // [0, kv_blocks), or -1 for none yet). Takes effect at the next forward_batch.
  void set_block_table(int slot, std::span<const int32_t> blocks);
  int64_t max_blocks_per_seq() const { return max_blocks_per_seq_; }
  bool paged() const { return options_.kv_blocks > 0; }
  // Paged sessions: the KV batch the last forward_batch gave the kernels (device pointers, and
  // the host's description of the batch: KvBatch::flash_passes).
  const KvBatch& kv_batch() const { return kv_; }
  const SessionOptions& options() const { return options_; }

  // Paged sessions: one forward over the rows of several sequences, row t at positions[t] of
  // sequence slots[t] (at most the plan's max_tokens rows; every position must be in a block of
  // its slot's table). Returns F32 logits [logit_rows.size(), vocab] on the host of the rows
  // `logit_rows` (ascending); the tensor is reused by the next call.
  //
  // `greedy` (empty, or one flag per logit row): the flagged rows are only picked greedily, see
  // greedy_picks(); on a GPU they are reduced on the device and their logits are not copied back
  // (their rows of the returned tensor are then undefined): a decode step of 128 greedy
  // sequences of a 152k vocabulary copies 1 KB instead of 78 MB. On the CPU every row is there.
  const Tensor& forward_batch(std::span<const int32_t> token_ids,
                              std::span<const int32_t> positions, std::span<const int32_t> slots,
                              std::span<const int64_t> logit_rows,
                              std::span<const uint8_t> greedy = {});

  // The last forward_batch's greedy picks, one per logit row (meaningful for the rows it flagged
  // greedy): the argmax (mg::argmax: the lowest id wins ties) and the first non-finite logit's id
  // (mg::find_non_finite; -1 when the row is finite, and then `token` is unusable otherwise).
  struct GreedyPick {
    int32_t token = -1;
    int32_t first_non_finite = -1;
  };
  std::span<const GreedyPick> greedy_picks() const { return greedy_picks_; }

  const ExecutionPlan& plan() const { return *plan_; }
  Profiler& profiler() { return profiler_; }

 private:
  // Runs one chunk and copies the logits of its rows [first_row, tokens) to `logits_out` (none
  // when first_row == tokens).
  void run_chunk(const int32_t* token_ids, const int32_t* positions, int64_t tokens,
                 int64_t first_row, float* logits_out);
  // Uploads the chunk's ids, positions and (paged) slots and block tables, then runs the nodes
  // (a captured CUDA graph where one applies).
  void upload_and_run(const int32_t* token_ids, const int32_t* positions, const int32_t* slots,
                      int64_t tokens);
  // GPUs: greedy_picks_ of the first `rows` rows of logits_f32_device_ (waits for them).
  void pick_greedy_on_device(int64_t rows, int64_t vocab);
  // GPUs, contiguous cache: one decode step of `token` at `position` whose next token is picked
  // greedily on the device (generate with greedy sampling): the step's logits row is reduced
  // there and two ints come back instead of the F32 row (vocab x 4 bytes) and a host argmax.
  GreedyPick greedy_step_on_device(int32_t token, int32_t position);
  // Queues every node for `tokens` rows.
  void run_nodes(int64_t tokens);

  std::shared_ptr<const ExecutionPlan> plan_;
  SessionOptions options_;
  Communicator* comm_;
  std::unique_ptr<ThreadPool> pool_;
  std::unique_ptr<Stream> stream_;
  Tensor arena_;
  Tensor workspace_;
  std::vector<std::unique_ptr<OpState>> states_;  // per plan node
  // Per plan node, argument views built once; activation views get their row count per call.
  std::vector<std::vector<Tensor>> node_inputs_;
  std::vector<std::vector<Tensor>> node_outputs_;
  Tensor host_ids_;  // I32 [max_tokens] staging for token ids / positions
  Tensor host_positions_;
  Tensor logits_;  // F32 [T, vocab] on the host, returned by forward()
  // F32 [max_tokens, vocab] on the device, when the logits are kept in another activation dtype
  // (GPUs): converted here before the copy to the host.
  Tensor logits_f32_device_;
  // forward_batch's greedy picks: I32 [max_tokens, 2] on the device (GPUs), then on the host.
  Tensor picks_device_;
  Tensor picks_host_;
  std::vector<GreedyPick> greedy_picks_;
  Profiler profiler_;
  // While profiling: timing events on the stream, one pair per plan node and one at the start of
  // run_nodes (the origin the node events are placed on the host timeline from); made on first use.
  struct NodeEvents {
    std::unique_ptr<Event> begin;
    std::unique_ptr<Event> end;
  };
  std::vector<NodeEvents> node_events_;
  std::unique_ptr<Event> nodes_origin_;
  double profile_bookkeeping_us_ = 0.0;  // this forward's time spent reading them
  // With SessionOptions::cuda_graph: one graph per row count (1 for a contiguous session, up to
  // max_sequences when paged), captured on first use.
  std::map<int64_t, std::unique_ptr<CudaGraph>> graphs_;
  int64_t graph_max_rows_ = 0;
  // Paged KV cache: kv_ points at row_slots_ and block_tables_ (plan device); host_slots_ and
  // host_block_tables_ are their host copies, uploaded before a forward (the tables: only the
  // rows that changed).
  KvBatch kv_;
  int64_t max_blocks_per_seq_ = 0;
  Tensor row_slots_;
  Tensor block_tables_;
  Tensor host_slots_;
  Tensor host_block_tables_;      // I32 [max_sequences, max_blocks_per_seq], -1: no block
  std::vector<int> dirty_slots_;  // block-table rows changed since the last upload
};

}  // namespace mg
