// Small types shared by the MoE kernel pieces (prepare/finalize, experts, the fused kernel).
//
// Tensors cross these interfaces as raw pointers with their shapes written next to them, in
// the vocabulary of DESIGN.md: *expanded* rows are tokens x k, *permuted* rows are sorted by
// expert, top-k ids are int32 [M, k] global expert ids, top-k weights fp32 [M, k]. Raw pointers
// keep the hot path free of allocation and are what CUDA kernels take. Activations (hidden
// states, expert outputs) are `void*` in ExpertsShape::dtype, the activation dtype of the node's
// device: F32 on the CPU, BF16/F16/F32 on CUDA; router logits, top-k weights are always fp32 and
// ids int32. All pointers of one call live on the node's device.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "framework/core/dtype.h"
#include "framework/parallel/parallel_config.h"
#include "ops/moe/config.h"

namespace mg {

class Communicator;
class Stream;
class ThreadPool;

// How tokens are laid out for the experts.
enum class ActivationFormat : uint8_t {
  kStandard,  // [M, H] with top-k ids/weights [M, k]
  kBatched,   // [E_local, max_tokens_per_expert, H] with expert_num_tokens [E_local]
};
std::string_view activation_format_name(ActivationFormat format);

// One rank's share of an MoE layer: what the experts of this rank compute.
struct ExpertsShape {
  int64_t num_experts = 0;        // E, global
  int64_t hidden_size = 0;        // H
  int64_t intermediate_size = 0;  // I of this rank's shard (I / moe_tp_size)
  int64_t top_k = 0;
  ActivationConfig activation;
  // Llama-4: the top-1 weight scales the expert input (applied in prepare) instead of its
  // output.
  bool weight_on_input = false;
  // Global -> local expert ids (-1: another rank's expert); num_local() = E_local.
  ExpertMap expert_map;
  // Element type of the activations (hidden states, expert outputs).
  DType dtype = DType::kF32;

  int64_t num_local_experts() const { return expert_map.num_local(); }
  // Rows of one local w13: 2 I (gated) or I.
  int64_t w13_rows() const {
    return is_gated(activation.kind) ? 2 * intermediate_size : intermediate_size;
  }
};

// This rank's shard of `config` under `parallel` (intermediate size split by moe_tp_size, which
// must divide it; experts placed by the EP expert map). Throws mg::Error when it does not split.
ExpertsShape local_experts_shape(const MoEConfig& config, const ParallelConfig& parallel);

// What the kernel pieces may use while they run.
struct MoEExecContext {
  ThreadPool* pool = nullptr;
  Stream* stream = nullptr;
  // The ranks prepare/finalize exchange tokens with (the DP group); null for a single rank.
  Communicator* comm = nullptr;
};

// Tokens as prepare() hands them to the experts.
struct DispatchedTokens {
  ActivationFormat format = ActivationFormat::kStandard;
  // Standard: [num_tokens, H], ids/weights [num_tokens, k] (global ids; another rank's experts
  // are skipped by the experts). Batched: [E_local * max_tokens_per_expert, H].
  const void* hidden = nullptr;
  int64_t num_tokens = 0;
  const int32_t* topk_ids = nullptr;
  const float* topk_weights = nullptr;
  // Batched only: [E_local] rows used in each expert's slab.
  const int32_t* expert_num_tokens = nullptr;
  int64_t max_tokens_per_expert = 0;
  // Where the experts write: standard [num_tokens, H] weighted and summed over k; batched
  // [E_local * max_tokens_per_expert, H], one unweighted output row per input row.
  void* expert_output = nullptr;
  // Whatever finalize() needs from prepare() (in the workspace; owned by the prepare/finalize).
  const void* finalize_state = nullptr;
};

// Monolithic path: tokens and their router logits as the experts see them.
struct DispatchedLogits {
  const void* hidden = nullptr;          // [num_tokens, H]
  const float* router_logits = nullptr;  // [num_tokens, E]
  int64_t num_tokens = 0;
  void* expert_output = nullptr;  // [num_tokens, H]
  const void* finalize_state = nullptr;
  // [num_tokens, k] global ids and weights the runner already routed (Router::gate_and_route), or
  // null: the experts route from router_logits. Set only where the prepare/finalize forwards
  // them (PrepareFinalize::forwards_routing) and the experts take them
  // (ExpertsMonolithic::takes_routing).
  const int32_t* topk_ids = nullptr;
  const float* topk_weights = nullptr;
};

// The F32 view of an activation pointer, for the CPU code (which runs F32 only).
inline const float* f32_ptr(const void* p) {
  return static_cast<const float*>(p);
}
inline float* f32_ptr(void* p) {
  return static_cast<float*>(p);
}

}  // namespace mg
