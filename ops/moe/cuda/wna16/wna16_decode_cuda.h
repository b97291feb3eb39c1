// The decode path of the packed weight-only experts (cuda_wna16: INT4 / INT8; cuda_fp4: MXFP4,
// NVFP4): the routed expert MLPs of a few tokens (M <= kWna16DecodeMaxTokens) as two
// weight-streaming kernels over the SAME packed layout as the grouped GEMM
// (wna16_experts_cuda.h, section 1: no second copy of the weights), with no permutation step:
//
//   up:   act[t*k + j, :] = act_fn(W13[e] x[t] + b13[e])       e = expert_map[topk_ids[t, j]]
//   down: out[t, :] = sum_j w[t, j] * (W2[e] act[t*k + j] + b2[e])
//
// written straight to the output (no align, no combine launch: route -> up -> down, three
// launches per layer instead of five). Each kernel reads every touched expert's packed weights
// once, however many of the tokens share it. Pairs whose expert is not on this rank
// (expert_map == -1) contribute nothing; a token with no local pair gets zeros. The kernels live
// in wna16_decode_cuda.cuh (the header comment there says how the work is cut and why mma.sync).
// Host-only header.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "ops/moe/cuda/moe_cuda_types.h"
#include "ops/moe/cuda/wna16/wna16_experts_cuda.h"

namespace mg::cuda {

struct Wna16DecodeArgs {
  const void* x = nullptr;              // [M, H] T
  const int32_t* topk_ids = nullptr;    // [M, k] global expert ids (device)
  const float* topk_weights = nullptr;  // [M, k] (device)
  const int32_t* expert_map = nullptr;  // [E_global] global -> local id (< kMaxRouteExperts) or -1
  int identity_experts = 0;     // > 0: expert_map[i] == i for all E = identity_experts (not read)
  Wna16Weights w13;             // parts 2 gated (gate, up) / 1 plain, [E, N1, H] packed
  const float* b13 = nullptr;   // [E, N1] F32 or null
  Wna16Weights w2;              // [E, H, I] packed
  const float* b2 = nullptr;    // [E, H] F32 or null
  void* act_scratch = nullptr;  // [M * k, I] T (wna16_decode_scratch_bytes)
  void* out = nullptr;          // [M, H] T
  int64_t num_tokens = 0, top_k = 0, hidden = 0, inter = 0;
  MoEActParams act;
};

// How the kernels are cut (for sweeping them and for the tests); every choice computes the same
// numbers up to the fp32 summation order of the K slices (fixed for a given choice: every launch
// with the same tiles is bit for bit the same). 0 picks the default, which the launcher derives
// from the shapes (wna16_decode_cuda.cuh, "Host side").
struct Wna16DecodeTiles {
  // Up kernel: warps that split one 8-row block's K (each a contiguous slice of 128-wide steps,
  // summed in shared memory in slice order); 0: as many as leave each warp at most the steps it
  // keeps in flight, at most 8. At most the K steps (more would be empty). 2 by default: the
  // H100 timing (2026-11-25, `MG_WNA16_TIMING=1 mg_cuda_tests
  // --gtest_filter='CudaWna16Decode.Timing*'`) had 2 slices at or near the best of every point,
  // µs rule (0) / 2: qwen3 int4 M = 1 34.6 / 34.7, M = 2 59.4 / 56.7, M = 4 96.7 / 90.1, M = 8
  // 182.1 / 180.3; gpt-oss MXFP4 M = 1 103.6 / 94.1, M = 2 174.9 / 154.8, M = 8 580.3 / 508.6.
  int up_k_slices = 2;
  // Up kernel: 8-row blocks (of each part) per CTA; the CTA has blocks x slices warps (at most
  // 16). 0: integer codes 1, FP4 8 / slices (at least 1). One block a CTA spreads the warps over
  // the SMs evenly (qwen3-30b-a3b's 96 blocks x 8 experts: 768 two-warp CTAs, where 4 blocks a
  // CTA made 192 eight-warp CTAs, 0.73 of a wave at 2 an SM): H200 timing test (session 19, the
  // step-aligned integer path), qwen3 int4 µs default (4) / 1: M = 1 24.2 / 22.6, M = 2 41.3 /
  // 41.0, M = 4 68.1 / 67.4; as the default, M = 1 24.0 -> 22.4, M = 8 127.3 -> 130.8 (only a
  // forced decode path runs 8 tokens: wna16_decode_threshold is 2), and the 48-layer qwen3
  // int4-g128 model decodes 320.6 / 320.6 -> 325.4 / 328.1 tokens/s.
  int up_blocks_per_cta = 0;
  // grid.y of the up kernel: CTAs per act-column tile that share the distinct experts. 0: 64 for
  // integer codes, 16 for FP4. H200 timing test with 8 route sets a replay (session 26,
  // `MG_WNA16_TIMING=1 mg_cuda_tests --gtest_filter='CudaWna16Decode.Timing*'`), µs 16 / 64 slots:
  // qwen3 int4 M = 4 54.3 / 50.2, M = 8 96.7 / 85.6; int8 M = 4 71.9 / 66.4, M = 8 128.0 / 110.3
  // (1 and 2 tokens have at most 16 pairs: the same grid); gpt-oss-120b MXFP4 M = 8 227.3 /
  // 225.5, M = 16 431.3 / 439.5.
  int up_expert_slots = 0;
  // Down kernel: K (= I) slices per (expert, 8-row block) item; 0: as for up_k_slices, and for
  // FP4 no more than give each warp of a CTA one item when every pair has its own expert
  // (ceil(warps / pairs): gpt-oss-120b MXFP4, H200, session 13, µs with slices by the rule (3) /
  // 2 / 1: M = 1 52.2 / 49.2 / 51.1, M = 2 92.6 / 91.7 / 88.4, M = 16 479.6 / 472.2 / 450.0).
  // Fewer when the partial sums would not fit in 32 KB of shared memory. Integer codes take 1
  // by the rule: H200 timing test with 8 route sets (session 26, as above), µs by the former rule
  // (2) / 1: qwen3 int4 M = 2 30.5 / 28.2, M = 4 54.3 / 50.3, M = 8 96.7 / 92.2; int8 M = 1
  // 28.3 / 26.6, M = 2 40.2 / 36.2, M = 4 71.9 / 65.9, M = 8 128.0 / 120.4.
  int down_k_slices = 0;
  // Down kernel: warps per CTA (1 .. 16), dealt the CTA's (expert, block, slice) items in turn;
  // 0: 8, 16 with swapped operands (swap_operands) of integer codes.
  int down_warps = 0;
  // 8-row blocks of output columns per down CTA; 0: as few as keep four CTAs on every SM.
  int down_blocks_per_cta = 0;
  // Down kernel: before its pdl_wait (while the up kernel still streams W13) each CTA asks L2
  // for its blocks of every touched expert's W2 (codes and scales). Off until timed.
  bool down_prefetch_l2 = false;
  // Weight loads ask L2 to evict their lines first (each is read once per launch).
  bool evict_first = true;
  // At one token, the unswapped FP4 up kernel reads x from shared memory, staged once a CTA as
  // its units' mma A operands (wna16_decode_cuda.cuh, stage_x_units), instead of from global
  // memory through L1; false: never. H200 timing test (session 30), gpt-oss-120b MXFP4 M = 1
  // 36.6 µs staged / 39.7 not.
  bool up_stage_x = true;
  // Integer codes on the exact path and FP4 codes whose scales T holds (BF16 MXFP4, NVFP4), at up
  // to 8 tokens: the weights of two 8-row blocks as the mma's A operand and the pairs' x as B
  // (wna16_decode_cuda.cuh, block16_gemm), where the other kernels make one block B and the pairs
  // A. Every K slice count above then counts slices of a 16-row item, and the default down blocks
  // per CTA is even. 1: at 1 .. 8 tokens; 0: never; -1 (the rule): at 2 .. 8 tokens. H200
  // (session 22), the timing test (`MG_WNA16_TIMING=1 mg_cuda_tests
  // --gtest_filter='CudaWna16Decode.Timing*'`, experts only, µs not swapped / swapped with 16 down
  // warps): qwen3-30b-a3b int4-g128 M = 1 20.0 / 20.4, 2 35.3 / 28.6, 4 55.5 / 50.1, 8 109.7 /
  // 88.0; gpt-oss-120b MXFP4 (8 down warps) M = 1 46.1 / 47.4, 2 81.7 / 73.3, 4 145.1 / 132.7,
  // 8 249.1 / 231.9. At one token the fewer, longer items lose what the instructions gain: `bench
  // e2e --cuda-graph` decode (batch 1) 345.8 / 346.2 -> 343.9 / 342.7 tokens/s (48-layer qwen3
  // int4-g128), 394.3 -> 385.2 (24-layer GPT-OSS-20B MXFP4).
  int swap_operands = -1;
  // Programmatic stream serialization for both kernels: 1 on, 0 off, -1 the rule: on for integer
  // codes, and for FP4 at one token only. H200 timing (session 13, `MG_WNA16_TIMING=1
  // mg_cuda_tests --gtest_filter='CudaWna16Decode.Timing*'`, µs on / off): qwen3-30b-a3b int4
  // M = 1 27.0 / 27.8, M = 2 48.0 / 49.6; gpt-oss-120b MXFP4 M = 1 52.2 / 49.2, M = 4 170.3 /
  // 152.5, M = 16 479.6 / 425.3 (the down kernel's CTAs, resident early, take SM room the up
  // kernel's wave could use). Session 30 (the same test, x staged as mma tuples): gpt-oss-120b
  // MXFP4 M = 1 34.8 / 36.5, M = 2 74.5 / 67.5, M = 4 121.2 / 119.4, M = 8 244.7 / 214.6, M = 16
  // 411.7 / 408.2: one token gains, where the up kernel's 360 CTAs are one wave.
  int pdl = -1;
};

// The most tokens the kernels take: a (16-row) m16n8k16 A operand holds the pairs of one expert,
// and a token's top-k experts are distinct, so an expert has at most M pairs (more pairs of one
// expert, which routing never makes, are run in groups of 16 and stay correct; up to 8 tokens the
// kernels use groups of 8, half the A operand, in a variant with fewer registers). The pairs
// (M * k <= 256) are grouped in shared memory.
inline constexpr int64_t kWna16DecodeMaxTokens = 16;
// The most (token, expert) pairs one launch takes (M * k; grouped in shared memory).
inline constexpr int64_t kWna16DecodeMaxPairs = 256;

// The experts backends (cuda_wna16, cuda_fp4) take the decode path at M <= this many tokens
// (wna16_decode_threshold: integer weights the per-value dequantization takes; the exact
// integer-code path and FP4 have their own, below) unless a kernel is forced (`:wna16_decode`
// forces it up to kWna16DecodeMaxTokens,
// `:wna16_mma16|wna16_mma32|wna16_mma64` the grouped GEMMs). Set by the H100 timing
//   MG_WNA16_TIMING=1 mg_cuda_tests --gtest_filter='CudaWna16Decode.Timing*'
// (session 9): the decode path beats the grouped GEMM at M = 1 on both shapes (qwen3-30b-a3b
// int4-g128 33.1 vs 37.6 us, gpt-oss-120b MXFP4 91.7 vs 97.3), at M = 2 only on qwen3 int4 (51.6
// vs 54.5) and not on gpt-oss MXFP4 (176.8 vs 133.6), and loses from M = 4 on.
inline constexpr int64_t kWna16DecodeThreshold = 1;

// The same for weights the decode kernels take through the exact integer-code path (integer
// codes whose zero points are all integer codes; wna16_decode_cuda.cuh), whose kernels swap the
// mma's operands from 2 tokens (Wna16DecodeTiles::swap_operands): the decode path wins at every
// token count up to 8, the most the swapped kernels take. The whole layer with routing, H200
// (session 22, `moegraph bench moe --quant int4-g128|int8-g128 --shape qwen3-30b-a3b --kernel
// wna16_decode,wna16_mma16 --tokens 1,2,3,4,5,6,8`), µs decode / grouped GEMM: INT4 1 27.3 /
// 45.6, 2 35.6 / 53.4, 3 48.5 / 64.5, 4 56.9 / 69.7, 5 70.0 / 86.2, 6 79.4 / 94.7, 8 93.6 /
// 101.3; INT8 1 33.1 / 48.0, 2 44.4 / 59.5, 3 60.1 / 66.7, 4 72.7 / 86.4, 8 117.3 / 125.3. (Before
// the swap it was 2: H100, session 11, qwen3 int4-g128 M = 8 139.6 / 122.5.)
inline constexpr int64_t kWna16DecodeExactThreshold = 8;

// The same for FP4 codes (always the exact E2M1 path). Against the grouped GEMM with the same
// bit placement (wna16_gemm.cuh), H200, session 13 (docs/performance.md, "FP4 experts with the
// E2M1 codes placed bit for bit"): `MG_WNA16_TIMING=1 mg_cuda_tests
// --gtest_filter='CudaWna16Decode.Timing*'`, gpt-oss-120b MXFP4, µs decode / grouped GEMM: M = 1
// 46.2 / 54.9, 2 80.7 / 72.8, 4 143.3 / 127.1, 16 401.2 / 316.8; `moegraph bench moe --quant
// mxfp4|nvfp4 --shape gpt-oss-120b,qwen3-30b-a3b --kernel wna16_decode,wna16_mma16 --tokens
// 1,2,3,4,6,8,12,16 --no-check`: the GEMM wins from 3 tokens on both shapes and both schemes, at
// 2 on gpt-oss (88.9 / 83.4 MXFP4), ties at 2 on qwen3 (50.8 / 51.8), loses at 1 on qwen3 (37.1
// / 41.8) and NVFP4 gpt-oss (62.3 / 71.0).
inline constexpr int64_t kWna16DecodeFp4Threshold = 1;

// Whether the decode kernels take `w` through an exact path: FP4 codes always (E2M1 placed bit
// for bit), integer codes when every zero point is an integer code (found by the packer).
inline bool wna16_decode_exact(const Wna16Weights& w) {
  return w.codes != Wna16Codes::kInteger || w.zeros == Wna16Zeros::kIntegerCodes;
}

// The tokens up to which the experts backends take the decode path for these weights.
inline int64_t wna16_decode_threshold(const Wna16Weights& w13, const Wna16Weights& w2) {
  if (w13.codes != Wna16Codes::kInteger) return kWna16DecodeFp4Threshold;
  return wna16_decode_exact(w13) && wna16_decode_exact(w2) ? kWna16DecodeExactThreshold
                                                           : kWna16DecodeThreshold;
}

// Bytes of act_scratch for M tokens: [M * k, I] T, rounded up to 256.
inline size_t wna16_decode_scratch_bytes(int64_t tokens, int64_t top_k, int64_t inter,
                                         size_t element_bytes) {
  return (static_cast<size_t>(tokens * top_k * inter) * element_bytes + 255) / 256 * 256;
}

// T = __nv_bfloat16 or __half (instantiated in wna16_decode_<dtype>.cu); fp32 accumulation, act
// and out rounded to T once. Two launches; no host sync or allocation (graph-capturable). Throws
// mg::Error for shapes the kernels refuse (wna16_expert_mlp_check), more than
// kWna16DecodeMaxTokens tokens or more than 256 pairs, or weights that do not fit (H, I).
template <typename T>
void launch_wna16_decode_experts(const Wna16DecodeArgs& args, const Wna16DecodeTiles& tiles,
                                 cudaStream_t stream);

}  // namespace mg::cuda
