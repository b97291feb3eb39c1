// Engine: batched generation of many sequences on one compiled plan (continuous batching over a
// paged KV cache).
//
// Requests join with add_request() and leave when they finish or are cancelled; every step() runs
// one forward over all running sequences: each decoding sequence contributes its next token and
// sequences still in their prompt contribute a chunk of it (prefill and decode rows mixed in one
// forward, within the plan's max_tokens). The KV cache is a pool of fixed-size blocks; a sequence
// holds a block table and takes a new block when it grows past its last one (nothing is copied).
// A request is admitted when a sequence slot is free and the pool can hold its prompt and
// max_new_tokens (so a running sequence never waits for blocks: there is no preemption).
//
// Each sequence is sampled with its own options and seed and stops on its own conditions, so the
// tokens are those Session::generate would give it alone (greedy: equal ids; the logits differ
// from a lone run only by the order of float sums, within the dtype's tolerance). Greedy sequences
// are picked by Session::forward_batch's greedy picks (on a GPU an argmax on the device, so their
// rows of logits are not copied back); sampled ones from their row on the host.
//
// Threads: add_request(), cancel(), stats() and stop() may be called from any thread. step() must
// be called by one thread at a time; start() runs it on a background thread until stop(). Events
// are delivered on the thread that runs step(), with no engine lock held (a callback may call
// add_request(), cancel() or stats(), never step(); it must not block for long: every other
// sequence waits for it).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "framework/compile/execution_plan.h"
#include "framework/runtime/sampler.h"
#include "framework/runtime/session.h"

namespace mg {

using RequestId = uint64_t;

struct EngineOptions {
  // Sequences generated at once (sequence slots). 1..kMaxEngineSequences.
  int max_sequences = 8;
  // Positions per KV-cache block (1..4096).
  int64_t kv_block_size = 16;
  // Blocks in the pool; 0: enough for every slot to reach max_seq_len
  // (max_sequences * ceil(max_seq_len / kv_block_size)).
  int64_t kv_blocks = 0;
  // Requests waiting for a slot at most; add_request() beyond it throws mg::Error.
  int max_waiting = 4096;
  // CPU threads, profiling, and cuda_graph: on a CUDA device every forward of at most
  // max_sequences rows (the decode steps) replays a CUDA graph captured for its row count.
  SessionOptions session;
};

inline constexpr int kMaxEngineSequences = 4096;

enum class FinishReason {
  kNone,       // still generating
  kLength,     // max_new_tokens reached
  kStop,       // eos or a stop id was generated (it is the last token)
  kCancelled,  // cancel() or Engine destruction
  kError,      // the forward failed for this sequence (message in RequestEvent::error)
};

const char* finish_reason_name(FinishReason reason);  // "length", "stop", "cancelled", "error"

// One event of a request: a new token (token >= 0), its end (finish != kNone), or both at once.
struct RequestEvent {
  RequestId id = 0;
  int32_t token = -1;  // the generated id, -1 when the event carries none
  FinishReason finish = FinishReason::kNone;
  std::string error;  // with kError
};

struct RequestOptions {
  int max_new_tokens = 16;  // >= 1
  SamplingOptions sampling;
  uint64_t seed = 0;
  // Stop after the model's eos token (ModelInfo.eos_token_id, if >= 0) or one of stop_token_ids.
  bool stop_at_eos = true;
  std::vector<int32_t> stop_token_ids;
  // Called on the stepping thread with every event of this request; the last one has finish set.
  // May be empty (then use Engine::run_all or the finish counters).
  std::function<void(const RequestEvent&)> on_event;
};

struct EngineStats {
  int64_t kv_blocks_total = 0;
  int64_t kv_blocks_free = 0;
  int slots_total = 0;
  int slots_free = 0;
  int running = 0;  // sequences holding a slot
  int waiting = 0;  // requests not admitted yet
  uint64_t steps = 0;
  uint64_t generated_tokens = 0;
  uint64_t prompt_tokens = 0;  // prefilled
};

class Engine {
 public:
  // Validates the options (mg::Error) and allocates the KV-cache pool.
  Engine(std::shared_ptr<const ExecutionPlan> plan, EngineOptions options);
  ~Engine();  // stops the loop; unfinished requests end with kCancelled
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Queues a request. Throws mg::Error for an empty prompt, ids outside the vocabulary, bad
  // sampling options, max_new_tokens < 1, prompt + max_new_tokens > max_seq_len, a sequence
  // that needs more blocks than the pool has, or a full waiting queue.
  RequestId add_request(std::vector<int32_t> prompt, RequestOptions options);

  // Ends a waiting or running request before the next step (its slot and blocks return to the
  // pool; its last event has kCancelled). False when the id is unknown or already finished.
  bool cancel(RequestId id);

  // One scheduling round: admit, run one forward, sample, deliver events, retire finished
  // sequences. Returns false when there was nothing to do.
  bool step();

  // Runs step() on a background thread (it sleeps while idle) until stop().
  void start();
  void stop();

  // Runs every queued request to completion on the calling thread (no background loop).
  void run_until_idle();

  EngineStats stats() const;
  const ExecutionPlan& plan() const;

 private:
  struct Impl;  // engine.cc: the session, the queues, the block pool
  std::unique_ptr<Impl> impl_;
};

}  // namespace mg
