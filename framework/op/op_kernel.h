// What a compiled node runs: an OpKernel built once per node at compile time, called per forward.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "framework/core/tensor.h"
#include "framework/core/thread_pool.h"
#include "framework/device/stream.h"
#include "framework/op/kv_batch.h"

namespace mg {

class Communicator;

// Per-session mutable state of one node, e.g. the KV cache of an attention node. Kernels are
// shared by every session of a plan; anything that changes between calls lives here.
class OpState {
 public:
  virtual ~OpState() = default;
};

struct StateOptions {
  Device device;
  // Longest sequence (prompt + generated) the state must hold.
  int64_t max_seq_len = 0;
  // Paged KV cache (kv_batch.h): a pool of kv_blocks blocks of kv_block_size positions, shared by
  // every sequence of the session. 0: one contiguous sequence of max_seq_len positions.
  int64_t kv_blocks = 0;
  int64_t kv_block_size = 0;
};

// Rows of a KV cache state: kv_blocks * kv_block_size when paged, else max_seq_len. Throws
// mg::Error for sizes that are not positive.
inline int64_t kv_cache_rows(const StateOptions& options) {
  if (options.kv_blocks == 0 && options.kv_block_size == 0) {
    MG_CHECK(options.max_seq_len > 0, "KV cache: max_seq_len must be positive, got {}",
             options.max_seq_len);
    return options.max_seq_len;
  }
  MG_CHECK(options.kv_blocks > 0 && options.kv_block_size > 0,
           "KV cache: kv_blocks ({}) and kv_block_size ({}) must both be positive",
           options.kv_blocks, options.kv_block_size);
  MG_CHECK(options.kv_blocks <= (int64_t{1} << 30) && options.kv_block_size <= 4096,
           "KV cache: kv_blocks {} (at most 2^30) or kv_block_size {} (at most 4096) too large",
           options.kv_blocks, options.kv_block_size);
  return options.kv_blocks * options.kv_block_size;
}

// Everything a kernel may use while it runs. No member is owned.
struct ExecContext {
  Device device;
  Stream* stream = nullptr;    // main stream of the session
  ThreadPool* pool = nullptr;  // CPU worker threads
  OpState* state = nullptr;    // this node's state, or null if it has none
  void* workspace = nullptr;   // scratch of at least workspace_bytes(max_tokens) bytes
  size_t workspace_bytes = 0;
  Communicator* comm = nullptr;  // null for a single rank
  // The sequences of this forward's rows and their block tables (stateful ops with a KV cache);
  // null: every row is one sequence in a contiguous cache.
  const KvBatch* kv = nullptr;
};

class OpKernel {
 public:
  virtual ~OpKernel() = default;

  // inputs: one tensor per node input, in order. Activations are views [T, ...] for this call;
  // weights are as the place-weights pass stored them; absent optional inputs are undefined.
  // outputs: preallocated views [T, ...] to write.
  virtual void run(const ExecContext& ctx, std::span<const Tensor> inputs,
                   std::span<const Tensor> outputs) = 0;

  // Scratch bytes needed for a call with up to `max_tokens` tokens (planned at compile time).
  virtual size_t workspace_bytes(int64_t max_tokens) const { return 0; }

  // The per-session state this node needs, or null.
  virtual std::unique_ptr<OpState> create_state(const StateOptions& options) const {
    return nullptr;
  }

  // False when run() synchronises with the host or otherwise cannot be recorded into a CUDA
  // graph (Session refuses --cuda-graph for such a plan, naming the node).
  virtual bool graph_capturable() const { return true; }

  // Short description of the chosen implementation for `moegraph inspect --plan`
  // (e.g. "cpu_eigen"); may span several lines (MoE nodes list rejected backends).
  virtual std::string describe() const { return {}; }
};

}  // namespace mg
