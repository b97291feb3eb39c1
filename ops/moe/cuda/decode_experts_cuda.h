// CUDA decode experts of the monolithic MoE backend: the routed expert MLPs of a few tokens
// (decode, M = 1..kDecodeMaxTokens) as two weight-streaming kernels, with no permutation step.
//
//   up:   act[t*k + j, :] = act_fn(W13[e] x'[t] + b13[e])       e = expert_map[topk_ids[t, j]]
//   down: out[t, :] = sum_j w'[t, j] * (W2[e] act[t*k + j] + b2[e])
//
// Each kernel reads every touched expert's weights once, however many of the tokens share it, so
// the time is the bytes of the distinct experts over the HBM bandwidth. Pairs whose expert is not
// on this rank (expert_map == -1) contribute nothing; a token with no local pair gets zeros.
// Host-only header (the kernels live in decode_experts_cuda.cuh).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "ops/moe/cuda/moe_cuda_types.h"

namespace mg::cuda {

struct DecodeExpertsArgs {
  const void* x = nullptr;              // [M, H] T
  const int32_t* topk_ids = nullptr;    // [M, k] global expert ids (device)
  const float* topk_weights = nullptr;  // [M, k] (device)
  const int32_t* expert_map = nullptr;  // [E] global -> local id (< kMaxRouteExperts) or -1
  int identity_experts = 0;     // > 0: expert_map[i] == i for all E = identity_experts (not read)
  const void* w13 = nullptr;    // [E_local, N1, H] T, N1 = 2I gated (gate, up) / I plain
  const void* b13 = nullptr;    // [E_local, N1] T or null
  const void* w2 = nullptr;     // [E_local, H, I] T
  const void* b2 = nullptr;     // [E_local, H] T or null
  void* act_scratch = nullptr;  // [M * k, I] T
  void* out = nullptr;          // [M, H] T
  int64_t num_tokens = 0, top_k = 0, hidden = 0, inter = 0;
  MoEActParams act;
  // Llama-4 (k == 1): x'[t] = w[t, 0] * x[t] and w' = 1; otherwise x' = x and w' = w.
  bool weight_on_input = false;
};

// T = float, __half or __nv_bfloat16 (instantiated in decode_experts_cuda_<dtype>.cu); fp32
// accumulation, act and out rounded to T once. Two launches per 256 (token, expert) pairs (more
// tokens are run in chunks); no host sync or allocation, so the call can be captured in a graph.
template <typename T>
void launch_decode_experts(const DecodeExpertsArgs& args, cudaStream_t stream);

// How the two kernels are cut, for sweeping them (`mg_cuda_tests
// --gtest_filter='DecodeExpertsCuda.TimesTilesOnTheQwen3Shape'`); every choice computes the same
// numbers (the forced-variant test checks each against the reference). 0 / kAuto: the default.
struct DecodeExpertsTiles {
  // Act columns per up CTA; 0: 64 for inter >= 2048, else cut by the SMs (up_units_per_cta in
  // decode_experts_cuda.cuh: qwen3's I = 768 takes 24).
  int up_units_per_cta = 0;
  // grid.y: CTAs per unit tile that share the distinct experts (CTAs past U return at once).
  int up_expert_slots = 16;
  // Pairs of one expert an up warp dots each weight row with at once (1, 2, 4 or 8; an expert
  // with more pairs takes more passes over its rows); 0: the tokens rounded up to a power of two,
  // at most 4.
  int up_pairs_per_pass = 0;
  // 16-byte vectors of each weight row a lane loads before the first is used (4 or 8); 0: auto.
  int up_vectors = 0;
  // 0: as few rows as keep two CTAs on every SM in one wave. A down CTA owns whole rows of all
  // experts, so all CTAs carry the same work and a second, partial wave costs up to 30%.
  int down_rows_per_cta = 0;
  // Weight rows per down warp item x 16-byte vectors of each in flight: 2x4, 4x2 or 4x4; 0: auto.
  int down_rows_per_warp = 0;
  int down_vectors = 0;
  // The down kernel asks L2 for its CTA's W2 rows (one bulk prefetch per expert) before it waits
  // for the up kernel, so the two kernels' weight streams overlap (sm_90; else ignored). Off by
  // default: on the H100 the sweep timed it 0.5-1.3 us slower at M = 1, 2, 4, 8 on the qwen3
  // shape (34.2 / 61.0 / 109.3 / 189.2 us with it, 32.9 / 60.5 / 108.1 / 187.8 without).
  bool down_prefetch = false;
  // The up kernel asks L2 for its CTA's first weight rows while it groups the pairs (sm_90). Off
  // by default: on the H200 the sweep timed it 1.0-1.8 us slower at M = 1, 2, 4 on the qwen3
  // shape (28.4 / 49.8 / 86.8 us with it, 27.4 / 48.6 / 85.0 without; M = 8 168.3 / 168.4).
  bool up_prefetch = false;
  // Weight loads ask L2 to evict their lines first (each is read once per launch), which keeps
  // the prefetched W2 rows and the activations resident.
  bool evict_first = true;
  // Launch both kernels with programmatic dependent launch (launch_pdl_if, pdl.cuh; MG_PDL=0
  // turns it off for the whole process).
  bool pdl = true;
  // Which kernels run: both, or one alone (the timing test times each; alone they compute
  // nothing useful).
  enum class Parts { kBoth, kUpOnly, kDownOnly };
  Parts parts = Parts::kBoth;
};

// launch_decode_experts with explicit tiles (instantiated for the same T).
template <typename T>
void launch_decode_experts_tiled(const DecodeExpertsArgs& args, const DecodeExpertsTiles& tiles,
                                 cudaStream_t stream);

// "" when the kernels take (hidden, inter), else the reason. Every weight row is read in 16-byte
// vectors, so both must be multiples of 8 elements.
inline std::string decode_experts_check(int64_t hidden, int64_t inter) {
  if (hidden <= 0 || inter <= 0) {
    return "hidden " + std::to_string(hidden) + " and inter " + std::to_string(inter) +
           " must be positive";
  }
  if (hidden % 8 != 0 || inter % 8 != 0) {
    return "hidden " + std::to_string(hidden) + " and inter " + std::to_string(inter) +
           " must be multiples of 8 (16-byte weight loads)";
  }
  return "";
}

// The most tokens the decode kernels take (their shared-memory pair groups are sized for it). The
// cuda_moe backend sends them at most 8 (row P1 of ops/moe/heuristics/unquantized_kernel_choice.cc:
// at 16 the grouped GEMMs match or beat them on 3 of the 4 bench shapes); `cuda_moe:decode` forces
// them up to 16. `moegraph bench moe --tokens 1,8,16 --kernel decode,grouped` compares the two.
inline constexpr int64_t kDecodeMaxTokens = 16;

}  // namespace mg::cuda
