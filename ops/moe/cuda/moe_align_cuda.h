// CUDA stages around the expert GEMMs (TensorRT-LLM's "build expert maps -> expand rows ->
// finalize"): align (group the token x top-k pairs by local expert), gather (x -> permuted rows),
// combine (permuted expert outputs -> weighted sum per token), and Llama-4's scale_input.
//
// Shapes: M tokens, k = top_k, num_pairs = M * k (pair p = t * k + j), E global experts,
// E_local experts on this rank, H hidden.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace mg::cuda {

// The most local experts and pairs launch_moe_align handles (one block scans the counts, one
// count per thread; pairs index int32 rows).
inline constexpr int64_t kMaxAlignLocalExperts = 1024;
inline constexpr int64_t kMaxAlignPairs = int64_t{1} << 30;

// Device arrays the caller carves from its workspace (sizes below); all written by
// launch_moe_align. It needs no other scratch.
struct MoEAlignment {
  int32_t* expert_counts = nullptr;   // [E_local]: pairs routed to each local expert
  int32_t* expert_offsets = nullptr;  // [E_local + 1]: exclusive prefix sum of counts;
                                      // expert_offsets[E_local] = pairs routed to this rank
  int32_t* pair_to_row = nullptr;     // [num_pairs]: permuted row of pair p = t*k + j, -1 when its
                                      // expert is not local (expert_map[id] == -1)
  int32_t* row_to_pair = nullptr;     // [num_pairs]: pair of permuted row r (r < offsets[E_local])
};

// topk_ids [num_pairs] int32 global ids; expert_map [E] int32 (device): global id -> local id or
// -1 (ids outside [0, E) count as not local). Rows of local expert e are
// [expert_offsets[e], expert_offsets[e+1]); within one expert the rows are in no fixed order
// (shared-memory atomics hand them out; the MoE result does not depend on it, every row's GEMM
// being independent of the others). row_to_pair beyond expert_offsets[E_local] is not written.
// Launches: one kernel when num_pairs <= 4096 (decode), else a memset of expert_counts and two
// kernels. Capturable in a CUDA graph.
void launch_moe_align(const int32_t* topk_ids, int64_t num_pairs, const int32_t* expert_map,
                      int64_t num_experts, int64_t num_local_experts, const MoEAlignment& out,
                      cudaStream_t stream);

// x [M, H] T -> x_perm [num_pairs, H] T: x_perm[pair_to_row[p]] = x[p / top_k] for every pair
// with a local expert (other rows untouched). 16-byte copies when H * sizeof(T) and the pointers
// allow. One launch.
template <typename T>
void launch_moe_gather(const void* x, int64_t num_tokens, int64_t top_k, int64_t hidden,
                       const MoEAlignment& a, void* x_perm, cudaStream_t stream);

// y_perm [num_pairs, H] T -> out [M, H] T:
//   out[t] = sum over j = 0..k-1 in order of w[t,j] * (y_perm[pair_to_row[t*k+j]] + b2[local])
// with local = expert_map[topk_ids[t*k+j]], fp32 accumulation and one rounding to T. Pairs whose
// row is -1 add nothing (a token without any gets 0). w2_bias [E_local, H] T or null;
// topk_ids / topk_weights [M, k]. Deterministic (no atomics); top_k <= 32. One launch.
template <typename T>
void launch_moe_combine(const void* y_perm, const MoEAlignment& a, const int32_t* topk_ids,
                        const float* topk_weights, const int32_t* expert_map, const void* w2_bias,
                        int64_t num_tokens, int64_t top_k, int64_t hidden, void* out,
                        cudaStream_t stream);

// Llama-4, weight on the input: x_out[t] = w[t, 0] * x[t] (fp32 multiply, one rounding) and
// w_out[t, j] = 1 for all j. x [M, H] T, w [M, k]. x_out may not alias x; w_out may alias w.
// One launch.
template <typename T>
void launch_moe_scale_input(const void* x, const float* topk_weights, int64_t num_tokens,
                            int64_t top_k, int64_t hidden, void* x_out, float* w_out,
                            cudaStream_t stream);

}  // namespace mg::cuda
