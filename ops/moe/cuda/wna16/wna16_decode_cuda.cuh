// Kernels of wna16_decode_cuda.h, included by wna16_decode_<dtype>.cu. nvcc only.
//
// Decode is bound by weight bytes: at M = 1 the up kernel reads k experts' packed W13 to produce
// k * I numbers, so what sets the time is how many bytes are in flight at once. Both kernels are
// cut into warp items of ONE 8-row block of one expert over a SLICE of K (a contiguous run of
// 128-wide steps): per step the packed layout gives the warp its block's 512 (INT8: 1024)
// contiguous bytes, one 16-byte load per lane (two for INT8), which is already the lane's
// mma.sync B fragment for the whole step. A lane issues the loads of up to kStepsInFlight steps
// (4 KB a warp; evict-first, L1::no_allocate: each weight line is read once per launch) before it
// uses the first (integer codes; FP4 half as many, kE2m1RoundSteps; round_landed says what keeps
// the compilers from sinking each load to its use), and by default a slice is at most that
// many steps, so a warp's whole item is one round of loads and at M = 1 the grid holds thousands of
// such warps (qwen3-30b-a3b up: 8 experts x 96 blocks x 2 slices). It multiplies with mma.sync
// m16n8k16 whose A operand is the (up to 16) pairs of the expert: rows g and g + 8 of lane (g, t)
// are the x (act) rows of pairs g and g + 8, read as 32-bit pairs of T through L1 (x and act are a
// few KB to a few hundred KB and are re-read by every warp), zero for rows past the pairs and
// columns past K. Integer codes on the exact path and FP4 codes scaled in T (BF16 MXFP4, NVFP4) at
// 2 to 8 tokens swap the two (block16_gemm; Wna16DecodeTiles::swap_operands says why not at 1): an
// item is TWO adjacent 8-row blocks, their dequantized weights the A operand (rows g and g + 8)
// and the x rows of up to 8 pairs the B operand, so no mma row is a zero row: ~37% fewer
// instructions per weight (INT4, one round of the qwen3 M = 1 up kernel, the same weights: 1017
// -> 642 SASS instructions, 64 -> 32 HMMA; the down kernel's 1304 -> 819).
//
// Dequantization, chosen per matrix at launch (the kernels are bound by instruction issue, not
// bytes, at the grouped GEMM's ~4-5 instructions a value: INT4 at M = 1 streams two values a
// byte):
//   integer codes whose zero points are all integer codes (Wna16Weights::zeros ==
//     kIntegerCodes, found by the packer: symmetric, uint8 zero points, integral F32 ones):
//     warp_block_gemm_exact. B is the exact integer q - z in T (wna16_exact_codes.h: INT4 one
//     LOP3 per nibble pair under the half2 magic 128 / 1024, one HSUB2 of the group's magic + z;
//     INT8 F16 one PRMT + one HSUB2 a pair; INT8 BF16 through F32), the mmas sum
//     U = Σ x (q - z) of one scale group in its own fp32 accumulator, and the group's end adds
//     s · U (one fma per C element; groups of 32 / 64 columns end per unit, 128 per step,
//     channel-wise once per slice). The weights are never rounded (the grouped GEMM rounds each
//     to T once), every product is exact, and no term is formed that must cancel: the sum's
//     rounding is the mma's accumulation of the dot product itself. Worst case over a group of
//     128 with |x| <= 4: |U| <= Σ|x (q - z)| <= 128 · 4 · 15 = 7680 (INT4), and an accumulation
//     that keeps b bits of its largest addend (b = 24 for fp32; Hopper's mma.sync truncates
//     rather than rounds the aligned addends) errs by at most 8 mmas x 18 truncations x
//     2^(1 - b) · Σ|x (q - z)|, i.e. ~1.7e-5 of Σ|x||w| at b = 24, against the 2^-9 relative
//     rounding of every weight to BF16 on the per-value path (tests/unit/moe/
//     wna16_exact_codes_test.cc checks that bound on emulated truncating sums). Not rounding the
//     weights is a difference in itself: the per-value path's round_T(s (q - z)) errs by one
//     value per code and group (BF16: up to 2^-9 of the weight), which adds up along K and moves
//     single outputs of the decode test by several times its per-element bound, so that test
//     holds this path to the reference on the unrounded weights (the first H100 run, against the
//     rounded ones, "failed" on exactly the elements a host emulation of the exact weights
//     reproduces bit for bit).
//   other integer codes (non-integer F32 zero points; Wna16Zeros::kReal): per value with the
//     grouped GEMM's Dequant (wna16_gemm.cuh: round_T(fma(q, s, -z·s))), warp_block_gemm.
//   MXFP4 / NVFP4: warp_block_gemm_e2m1. B is the E2M1 code placed bit for bit into T (its
//     magnitude bits as T's lowest exponent bits and top mantissa bit: e2m1 · 2^-126 in BF16,
//     subnormal codes included) times one HMUL2 by the power of two that unbiases it: 19
//     instructions for 8 values where the per-value Dequant (a byte permute, the 2^23 trick, a
//     multiply and half a conversion a value) takes ~4-5 a value. The scale multiplies the B
//     values in T with one more HMUL2 where T holds every scale exactly (BF16 MXFP4: BF16 has
//     F32's exponent range, and there the unbias is folded into the scale pair, one HMUL2 in all:
//     wna16_exact::e8m0_bf16_unbiased_pair; NVFP4 in both), else (F16 MXFP4) a per-unit fp32
//     accumulator (acc += 2^(e - 127) · U, the unit being its one scale group). No weight is
//     rounded: BF16 and NVFP4 give the per-value path's values bit for bit, F16 MXFP4 the unrounded
//     weights' result (the per-value path rounds 2^(e - 127) · e2m1 to F16, the same value wherever
//     F16 holds it).
// The INT4 and E2M1 nibble pairs (j, j + 4) of the exact paths come in a permuted k order inside
// the lane's 8 columns of a unit; the A registers are permuted the same way (permute_a: 4 PRMT a
// unit, shared by gate and up), which the mma's sum over k does not see.
// x is read from global memory per unit as before (the staged-x and swapped-operand variant of
// 23e41e0 is not part of this: it needs the >48 KB shared-memory opt-in of a9708ef and has not
// been re-checked).
//
// Why mma.sync and not plain FMAs: with FMAs every dequantized weight costs one FMA per pair
// (8 at M = 8) on top of its ~4 dequantization instructions, which at INT4 rates (two values a
// byte at 3 TB/s) no longer fits the SM's issue budget; the mma takes all 16 pair rows of a
// k16 x n8 tile in one instruction, so the cost per weight is the dequantization alone at any
// M <= 16, and the B fragment the layout hands each lane needs no shuffle. Rows past the pairs
// are zeros (wasted tensor-core work, which is free here).
//
// The K slices of an item are summed in shared memory in slice order (fixed for given tiles: no
// atomics, deterministic):
//   up    grid (ceil(I / 8 / blocks_per_cta), expert slots), blocks_per_cta x k_slices warps:
//         warp w is slice w % k_slices of act-column block blockIdx.x * blocks_per_cta +
//         w / k_slices (gated: the gate block and the up block, two accumulators), for the
//         experts u = blockIdx.y, + gridDim.y, ...; per (expert, pair group) every warp leaves
//         its accumulators in shared memory, and after a barrier the block's slice-0 warp adds the
//         other slices' in order, applies the activation (gate and up are both summed first) and
//         writes act[pair, 8 block + 2t .. +1] (one 32-bit store per lane and pair).
//   down  grid (ceil(H / 8 / blocks_per_cta)), `warps` warps: a CTA owns whole output rows h;
//         items (expert, pair group, 8-row block, K slice) are dealt round-robin to its warps,
//         each dot lands in shared memory partial[slice, pair, h - h0] (written by exactly one
//         lane), and after one barrier each out[t, h] = sum_j w[t, j] (sum over slices in order of
//         partial + b2) is summed over j in order: one rounding, the weighted top-k sum fused (no
//         combine launch).
// Every CTA groups the M * k pairs by local expert in shared memory first
// (decode::group_pairs, the BF16 decode path's), so no permutation launch is needed. For integer
// codes the down kernel is launched with programmatic stream serialization and groups its pairs
// while the up kernel finishes (FP4: without, Wna16DecodeTiles::pdl says why).
//
// What may bound it short of the bandwidth (to check with the timing test before tuning): the
// per-value dequantization where it is still used (shift-or, subtract, fma, half a conversion per
// value: ~4-5 instructions), which for INT4 is close to an SM's issue budget at 3 TB/s; the exact
// path's group ends (3 pair loads, a reciprocal and an fma per C element: ~75 SASS instructions a
// part, once per step at g128 and tested once a step there, IntPath::kExactSteps; once per unit
// at g32); the A pairs are 32-bit L1 loads, 2 per k16 at M <= 8 (4 above); registers (ptxas, CUDA
// 13.0 here: 96-128 a thread for the exact PairRows 8 kernels, the qwen3 M = 1 pair 124 (up) and
// 97 (down); a few (INT8 exact down) that ptxas holds at 64 with 64-140 stack bytes; the FP4 up
// and down kernels are held to 80, kUpMaxRegisters and kFp4DownMaxRegisters, with up to ~60
// bytes of spill; 16 warps an SM at 128); the group_pairs prologue every CTA runs (one barrier
// for up to 32 pairs); at larger M an up CTA walks its experts one after another, a barrier each.
// Both kernels are latency- and issue-bound at one token (~3 warps a scheduler, an instruction
// every 2.3-2.6 cycles: docs/performance.md, session 19), so instructions a warp drops show.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <string>
#include <type_traits>

#include "framework/core/error.h"
#include "framework/device/cuda/cuda_check.h"
#include "framework/device/cuda/cuda_utils.cuh"
#include "framework/device/cuda/dynamic_shared.cuh"
#include "framework/device/cuda/pdl.cuh"
#include "ops/moe/cuda/decode_experts_cuda.cuh"
#include "ops/moe/cuda/moe_activation_cuda.cuh"
#include "ops/moe/cuda/wna16/wna16_decode_cuda.h"
#include "ops/moe/cuda/wna16/wna16_exact_codes.h"
#include "ops/moe/cuda/wna16/wna16_gemm.cuh"

namespace mg::cuda::wna16_decode {

static_assert(kWna16DecodeMaxPairs == decode::kMaxPairs, "the host's bound is the kernels'");

// Warps of a CTA at most (the launch bound; the host checks the forced tiles against it).
inline constexpr int kMaxWarps = 16;
inline constexpr int kMaxThreads = 32 * kMaxWarps;

// Pairs of an expert multiplied at once (A rows of one m16n8k16): each kernel comes in two
// variants, PairRows 16 (rows g and g + 8 both loaded) and PairRows 8 (rows 8..15 zeros, no
// loads for them, fewer registers: ptxas gives a kernel the registers of its hungriest path).
// Both are correct for any grouping (an expert's pairs run in groups of PairRows); the host takes
// 8 up to 8 tokens, where routing (a token's top-k experts are distinct) gives no expert more
// than 8 pairs.
inline constexpr int kMaxPairRows = 16;

// K steps whose weights a lane loads before it uses the first: 128 bytes a lane (4 KB a warp)
// over the parts it streams (gated: gate and up): INT4 / FP4 8 steps of 16 bytes (gated 4), INT8
// 4 steps of 32 bytes (gated 2), so every variant holds the same 32 registers of words.
template <int Bits, int Parts>
inline constexpr int kStepsInFlight = (Bits == 4 ? 8 : 4) / Parts;

// Scale bytes per row and K step of a code kind (a constant: device code may not call the host
// constexpr function).
template <Wna16Codes Codes>
inline constexpr int kScaleBytesPerStep = static_cast<int>(wna16_scale_bytes_per_step(Codes));

// K steps of a round of the FP4 kernels (warp_block_gemm_e2m1): 16 words of codes a lane, half
// the integer kernels' round, which their register caps (kUpMaxRegisters, kFp4DownMaxRegisters)
// hold (round_landed, below, has the timing).
template <int Parts>
inline constexpr int kE2m1RoundSteps = 4 / Parts;

// How a kernel dequantizes integer codes, chosen at launch (int_path): per value (zero points
// that are not integer codes), or exact (warp_block_gemm_exact) with scale groups that may end at
// any 32-wide unit (groups of 32 or 64 columns), or only at a 128-wide K step's end (groups of a
// multiple of 128, or channel-wise): then the group end is tested once a step, so the unrolled
// step has no branch and no register moves to join one (the session 19 SASS profile of the qwen3
// g128 up kernel: 16 branches, ~100 register moves and ~80 re-zeroed A registers a round of 4
// steps). FP4 codes ignore it (their kernels are instantiated with kExact).
enum class IntPath { kPerValue, kExact, kExactSteps };

// A round's weight loads (kStepsInFlight steps) are all in flight before the first is used only
// if nothing lets the compilers move them down to their uses, and two things did: NVVM sinks the
// (non-volatile) asm loads to their first use, and ptxas, given them in order (asm volatile),
// sinks each into the branch that uses it, as a step past the slice (`if (s >= s_end) break`)
// makes every step's use conditional. So every kernel here had each step's loads just before
// that step's mmas: one step (16 bytes a lane) in flight and one memory latency a step, eight in
// a row for a warp of the qwen3 int4 M = 1 up kernel (SASS, tools/sass_schedule.py). Each round
// now folds every loaded word into round_landed, which is 0 through a runtime 0 no compiler can
// fold (opaque_zero), and ORs it into the round's first A register: the first mma needs every
// load, so all are issued before it and the warp waits once a round (two LOP3 a 16-byte vector).
// H200 timing test (`MG_WNA16_TIMING=1 mg_cuda_tests --gtest_filter='CudaWna16Decode.Timing*'`,
// session 21), qwen3-30b-a3b int4 µs before / after: M = 1 22.3 / 19.7, M = 2 41.0 / 35.5, M = 16
// 196.7 / 154.4. The FP4 path (warp_block_gemm_e2m1) takes rounds of half that size
// (kE2m1RoundSteps: 16 words a lane, its scale words landed with them): its register limits
// (kUpMaxRegisters 80, then a down cap of 64) leave no room for a round's 32 words (the down
// kernels then spilled 152-244 bytes, ptxas, and gpt-oss-120b MXFP4 went 46.1 -> 51.2 µs at
// M = 1, 394.7 -> 407.8 at M = 16), while 16 words spill less than the compilers' one step at a
// time (ptxas stack bytes of the BF16 MXFP4 kernels for up to 8 tokens: up 56 -> 24, down
// 72 -> 56). H200 (session 25), the timing test, gpt-oss-120b MXFP4 M = 1 46.3 -> 45.3 µs;
// `bench e2e` of the 24-layer GPT-OSS-20B-shaped MXFP4 model 424.8 / 424.7 -> 428.4 / 429.2
// tokens/s. The swapped FP4 kernel (warp_block16_gemm_e2m1, two blocks a round) keeps the
// per-step schedule.

// 0 as a value no compiler can fold: bit 31 of a count (never negative).
__device__ __forceinline__ uint32_t opaque_zero(int count) {
  return static_cast<uint32_t>(count) >> 31;
}

// `p` as a value NVVM cannot see through: ep + offset then stays one wide multiply-add, where
// NVVM folded ep's own 64-bit offset into every address (4-5 instructions a load, SASS).
template <typename P>
__device__ __forceinline__ const P* opaque(const P* p) {
  asm("mov.b64 %0, %0;" : "+l"(p));
  return p;
}

// 0, computed from every word of the N vectors at `v` (see above).
template <int N>
__device__ __forceinline__ uint32_t round_landed(const uint4* v, uint32_t zero) {
  uint32_t landed = 0;
#pragma unroll
  for (int i = 0; i < N; ++i) landed |= (v[i].x | v[i].y | v[i].z | v[i].w) & zero;
  return landed;
}

// x[k .. k + 1] of a T row as the packed pair of an mma A register; 0 past K (k is even and K a
// multiple of 8, so a pair is wholly in or out) or for a missing row.
template <typename T>
__device__ __forceinline__ uint32_t a_pair(const T* row, int k, int len) {
  if (row == nullptr || k >= len) return 0u;
  return __ldg(reinterpret_cast<const unsigned int*>(row + k));
}

// acc[part] += the 16 x 8 C fragment of A · W[expert] rows (part * part_rows + 8 block ..
// + 8)ᵀ over the K steps [s_begin, s_end) of K = len: A row g is a_lo (pair g), row g + 8 is a_hi
// (pair g + 8), each a T row of `len` elements or null (zeros). !kHi: no group has more than 8
// pairs, a_hi is not read (the A rows 8..15 are zeros without a load: M <= 8). Every lane of the
// warp calls it (mma.sync). Integer codes through the grouped GEMM's per-value Dequant (what
// zero points that are not integer codes take).
template <typename T, int Bits, int Parts, bool kHi>
__device__ __forceinline__ void warp_block_gemm(float (&acc)[Parts][4], const Wna16Weights& w,
                                                int expert, int block, int s_begin, int s_end,
                                                const T* a_lo, const T* a_hi, int len,
                                                uint64_t policy) {
  constexpr int kW = Bits == 4 ? 4 : 8;  // words per lane per step
  constexpr int kVecs = kW / 4;          // 16-byte loads per lane per step
  constexpr int kStepWords = 32 * kW;
  constexpr int kV = kStepsInFlight<Bits, Parts>;
  const int lane = static_cast<int>(threadIdx.x & 31);
  const int g_row = lane >> 2, t = lane & 3;
  const int k_steps = static_cast<int>(w.k_steps);
  const int64_t rows_padded = Parts * w.part_rows;
  const int64_t expert_blocks = static_cast<int64_t>(expert) * (rows_padded / 8);

  const uint32_t* wp[Parts];
  const float2* pp[Parts];
#pragma unroll
  for (int p = 0; p < Parts; ++p) {
    const int64_t row_block = expert_blocks + p * w.part_rows / 8 + block;
    wp[p] = w.words + row_block * k_steps * kStepWords + lane * 4;
    const int64_t row = row_block * 8 + g_row;  // expert * rows_padded + part row
    pp[p] = reinterpret_cast<const float2*>(w.params) + row * w.groups;
  }
  // The scale group of each 32-wide unit, followed with a counter instead of a division per unit
  // (the units are visited in order): units_per_group units share a group (G / 32: G is a
  // multiple of 32 when there are several groups; channel-wise, one group of any K, never
  // advances). The slice starts at unit 4 s_begin.
  const int units_per_group = w.groups == 1 ? INT_MAX : static_cast<int>(w.group_size / 32);
  const int last_group = static_cast<int>(w.groups) - 1;
  int group = w.groups == 1 ? 0 : 4 * s_begin / units_per_group;
  int units_left = w.groups == 1 ? INT_MAX : units_per_group - 4 * s_begin % units_per_group;
  {
    // The slice's pairs of this lane's row are contiguous (groups g_first .. g_last): ask L1 for
    // their lines before the weight loads, so the per-unit __ldg below hits L1 instead of
    // waiting on L2 in the middle of the dequantization (no registers held for them).
    const int g_first = min(group, last_group);
    const int g_last = w.groups == 1 ? 0 : min((4 * s_end - 1) / units_per_group, last_group);
#pragma unroll
    for (int p = 0; p < Parts; ++p) {
      const uintptr_t first = reinterpret_cast<uintptr_t>(pp[p] + g_first) & ~uintptr_t{127};
      const uintptr_t last = reinterpret_cast<uintptr_t>(pp[p] + g_last);
      for (uintptr_t line = first; line <= last; line += 128) {
        asm volatile("prefetch.global.L1 [%0];" ::"l"(line));
      }
    }
  }

  const uint32_t zero = opaque_zero(s_end);  // round_landed
  for (int s0 = s_begin; s0 < s_end; s0 += kV) {
    uint4 wv[kV][Parts][kVecs];
#pragma unroll
    for (int v = 0; v < kV; ++v) {
      const int s = s0 + v;
#pragma unroll
      for (int p = 0; p < Parts; ++p) {
#pragma unroll
        for (int q = 0; q < kVecs; ++q) {
          wv[v][p][q] = s < s_end
                            ? decode::load_weights(
                                  wp[p] + static_cast<int64_t>(s) * kStepWords + q * 128, policy)
                            : make_uint4(0u, 0u, 0u, 0u);
        }
      }
    }
    const uint32_t landed = round_landed<kV * Parts * kVecs>(&wv[0][0][0], zero);
#pragma unroll
    for (int v = 0; v < kV; ++v) {
      const int s = s0 + v;
      if (s >= s_end) break;  // uniform over the warp
#pragma unroll
      for (int unit = 0; unit < 4; ++unit) {
        // Units past K (the padding of the last step, A zero there) keep the last group, so no
        // pair past the row's is read.
        const int g = min(group, last_group);
        float2 sc[Parts];
#pragma unroll
        for (int p = 0; p < Parts; ++p) sc[p] = __ldg(pp[p] + g);
        if (--units_left == 0) {
          ++group;
          units_left = units_per_group;
        }
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int kc = s * 128 + unit * 32 + half * 16 + 2 * t;
          const uint32_t a[4] = {
              a_pair(a_lo, kc, len) | (v == 0 && unit == 0 && half == 0 ? landed : 0u),
              kHi ? a_pair(a_hi, kc, len) : 0u, a_pair(a_lo, kc + 8, len),
              kHi ? a_pair(a_hi, kc + 8, len) : 0u};
#pragma unroll
          for (int p = 0; p < Parts; ++p) {
            const uint4& vec = wv[v][p][Bits == 4 ? 0 : unit / 2];
            const uint32_t words[4] = {vec.x, vec.y, vec.z, vec.w};
            // 4 bits: word `unit`; 8 bits: word 2 unit + half of the step's 8 (two vectors).
            const uint32_t word = Bits == 4 ? words[unit] : words[(2 * unit + half) & 3];
            uint32_t b[2];
            wna16::Dequant<Bits, Wna16Codes::kInteger>::template fragment<T>(word, half, sc[p], b);
            grouped_gemm::mma_16816<T>(acc[p], a, b);
          }
        }
      }
    }
  }
}

// The natural pairs x[k + 8 i .. + 1] (i = 0..3: one 32-wide unit of lane t, k = 32 u + 2t) of a
// T row of `len` elements (len 0: no row, zeros): one base address, immediate offsets, 0 past len
// (k is even and len a multiple of 8, so a pair is wholly in or out).
template <typename T>
__device__ __forceinline__ void unit_pairs(const T* row, int k, int len, uint32_t (&p)[4]) {
  const unsigned int* base = reinterpret_cast<const unsigned int*>(row + k);
  const int left = len - k;
#pragma unroll
  for (int i = 0; i < 4; ++i) p[i] = left > 8 * i ? __ldg(base + 4 * i) : 0u;
}

// The A operands of one unit's two k16 mmas in the exact paths' k order (wna16::permute_a) for
// pair rows a_lo (g) and a_hi (g + 8; zeros unless kHi), read from global memory through L1.
template <bool kHi, typename T>
__device__ __forceinline__ void unit_a(const T* a_lo, const T* a_hi, int k, int len_lo, int len_hi,
                                       uint32_t (&a)[2][4]) {
  uint32_t lo[4], hi[4] = {};
  unit_pairs(a_lo, k, len_lo, lo);
  if constexpr (kHi) unit_pairs(a_hi, k, len_hi, hi);
  wna16::permute_a<kHi>(lo, hi, a);
}

// One token's x, staged in shared memory as the unswapped kernels' units take it as their mma A
// operands (permute_a of unit_pairs, row g only): entries 8 U + 2 t + m hold lane t's a[m] =
// {a[m][0], 0, a[m][2], 0} of 32-wide unit U (zeros past len), so a unit's A is two 16-byte
// shared loads straight into the mmas' register tuples, where it was four global loads through
// L1, their bounds, four PRMT and the moves that build the tuples. Every lane loads them, also
// those whose A row has no pair: their C rows are dot products of a row that is not theirs, which
// the epilogues never read. The BF16 MXFP4 one-token up kernel's round of 2 steps (32 HMMA):
// 555 SASS instructions with x from global memory, 444 staged (CUDA 13.0; 16-byte entries of
// the four x registers, which left the tuple moves to the loop, were ~540). `entries` = 32 per
// 128-wide step; every thread of the CTA takes part; the caller's barrier publishes it.
template <typename T>
__device__ __forceinline__ void stage_x_units(uint4* staged, int entries, const T* row, int len) {
  for (int i = static_cast<int>(threadIdx.x); i < entries; i += static_cast<int>(blockDim.x)) {
    const int unit_lane = i >> 1, m = i & 1;
    uint32_t lo[4], hi[4] = {};
    unit_pairs(row, (unit_lane >> 2) * 32 + 2 * (unit_lane & 3), len, lo);
    uint32_t a[2][4];
    wna16::permute_a<false>(lo, hi, a);
    staged[i] = make_uint4(a[m][0], 0u, a[m][2], 0u);
  }
}

// Entries of stage_x_units a 128-wide K step.
inline constexpr int kStagedEntriesPerStep = 32;

// The A operands of unit `unit` of step `s` from the x that stage_x_units staged.
__device__ __forceinline__ void staged_unit_a(const uint4* staged, int s, int unit,
                                              uint32_t (&a)[2][4]) {
  const int t = static_cast<int>(threadIdx.x & 3);
#pragma unroll
  for (int m = 0; m < 2; ++m) {
    const uint4 x4 = staged[(s * 4 + unit) * 8 + 2 * t + m];
    a[m][0] = x4.x, a[m][1] = x4.y, a[m][2] = x4.z, a[m][3] = x4.w;
  }
}

// The exact q - z of one INT8 word's four codes (k order 0..3) as two packed pairs of T, with
// `zm` the group's magic + z (wna16_exact_codes.h): F16 one PRMT and one HSUB2 a pair; BF16
// through F32 (`zm` then the F32 bits of 2^23 + z), whose 8-bit mantissa cannot hold the magic.
template <typename T>
__device__ __forceinline__ void int8_exact_pairs(uint32_t word, uint32_t zm, uint32_t (&b)[2]) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    const float zf = __uint_as_float(zm);
    float d[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      d[i] = __uint_as_float(wna16_exact::int8_magic_f32_bits(word, i)) - zf;
    }
    b[0] = wna16::pack_pair<T>(d[0], d[1]);
    b[1] = wna16::pack_pair<T>(d[2], d[3]);
  } else {
    b[0] = wna16::sub_pair<T>(wna16_exact::int8_magic_pair_f16(word, 0), zm);
    b[1] = wna16::sub_pair<T>(wna16_exact::int8_magic_pair_f16(word, 1), zm);
  }
}

// Integer codes whose zero points are integer codes (Wna16Zeros::kIntegerCodes): acc[part] +=
// the same C fragment as warp_block_gemm's, with the exact q - z as the B values
// (wna16_exact_codes.h) and the group scale applied once per group: the mmas accumulate
// U = Σ x (q - z) of the current group in u, and when the group ends (a unit of 32 columns, two,
// a step, or the slice for channel-wise) each C element (pair row, weight row 2t or 2t + 1) gets
// acc += s · u with the scale of its weight row. The lane's B row is weight row g of the block,
// whose z it recovers from its {s, -z·s} pair once per group. No term cancels: the rounding is the
// fp32 accumulation of the dot product itself and one fma per group and element.
template <typename T, int Bits, int Parts, bool kHi, bool kStepGroups>
__device__ __forceinline__ void warp_block_gemm_exact(float (&acc)[Parts][4], const Wna16Weights& w,
                                                      int expert, int block, int s_begin, int s_end,
                                                      const T* a_lo, const T* a_hi, int len,
                                                      uint64_t policy) {
  constexpr bool kBf16 = std::is_same_v<T, __nv_bfloat16>;
  constexpr int kW = Bits == 4 ? 4 : 8;  // words per lane per step
  constexpr int kVecs = kW / 4;          // 16-byte loads per lane per step
  constexpr int kStepWords = 32 * kW;
  constexpr int kV = kStepsInFlight<Bits, Parts>;
  // INT8 with BF16: q - z through F32 (wna16_exact_codes.h).
  constexpr bool kViaF32 = Bits == 8 && kBf16;
  const int lane = static_cast<int>(threadIdx.x & 31);
  const int g_row = lane >> 2, t = lane & 3;
  const int k_steps = static_cast<int>(w.k_steps);
  const int64_t rows_padded = Parts * w.part_rows;
  const int64_t expert_blocks = static_cast<int64_t>(expert) * (rows_padded / 8);
  const int64_t groups = w.groups;
  // A row past the pairs reads nothing (zeros).
  const int len_lo = a_lo == nullptr ? 0 : len;
  [[maybe_unused]] const int len_hi = a_hi == nullptr ? 0 : len;

  const uint32_t* wp[Parts];
  // The expert's {s, -z·s} pairs, and the lane's rows in them as 32-bit float offsets (an expert
  // has rows_padded x groups pairs, below 2^31 floats: weights_check): a group end's
  // loads are one add and one wide multiply each, where 64-bit pointers per part were rebuilt
  // from w.params at every group end (~40 of a g128 step's ~70 group-end instructions, SASS).
  const float* ep = opaque(w.params + expert_blocks * 8 * groups * 2);
  uint32_t z_off[Parts];  // weight row g's pairs (the lane's B row): its z
  uint32_t s_off[Parts];  // weight row 2t's pairs (s at 2 g); row 2t + 1's follow at + s_next
  const uint32_t s_next = static_cast<uint32_t>(2 * groups);
#pragma unroll
  for (int p = 0; p < Parts; ++p) {
    const int64_t row_block = expert_blocks + p * w.part_rows / 8 + block;
    wp[p] = w.words + row_block * k_steps * kStepWords + lane * 4;
    const uint32_t row = static_cast<uint32_t>(p * w.part_rows + block * 8);
    z_off[p] = (row + g_row) * s_next;
    s_off[p] = (row + 2 * t) * s_next;
  }
  // The group of each 32-wide unit, followed with a counter (the units are visited in order), as
  // warp_block_gemm; units past K (the padding of the last step, A zero there) keep the last
  // group, so no pair past the row's is read.
  const int units_per_group = groups == 1 ? INT_MAX : static_cast<int>(w.group_size / 32);
  const int last_group = static_cast<int>(groups) - 1;
  int group = groups == 1 ? 0 : 4 * s_begin / units_per_group;
  int units_left = groups == 1 ? INT_MAX : units_per_group - 4 * s_begin % units_per_group;
  {
    // The slice's pairs of this lane's row into L1 before the weight loads (warp_block_gemm's
    // reason); the warp's lanes cover the block's 8 rows, so rows 2t and 2t + 1 too.
    const int g_first = min(group, last_group);
    const int g_last = groups == 1 ? 0 : min((4 * s_end - 1) / units_per_group, last_group);
#pragma unroll
    for (int p = 0; p < Parts; ++p) {
      const uintptr_t first =
          reinterpret_cast<uintptr_t>(ep + z_off[p] + 2 * g_first) & ~uintptr_t{127};
      const uintptr_t last = reinterpret_cast<uintptr_t>(ep + z_off[p] + 2 * g_last);
      for (uintptr_t line = first; line <= last; line += 128) {
        asm volatile("prefetch.global.L1 [%0];" ::"l"(line));
      }
    }
  }
  float sc[Parts][2];  // s of weight rows 2t, 2t + 1 (C columns 2t, 2t + 1)
  uint32_t zm[Parts];  // magic + z of row g: a half2 pair, or (kViaF32) the F32 bits of 2^23 + z
  // The next group's scales and pair are loaded a group ahead (fetch), and taken at the group's
  // start (take): the zero code's reciprocal, which waited on these loads, was the decode down
  // kernel's most-sampled stall (docs/performance.md, the session 18 profile).
  float ahead_s[Parts][2];
  float2 ahead_pair[Parts];
  const auto fetch = [&](int gi) {
#pragma unroll
    for (int p = 0; p < Parts; ++p) {
      const uint32_t g2 = 2 * static_cast<uint32_t>(gi);
      ahead_s[p][0] = __ldg(ep + (s_off[p] + g2));
      ahead_s[p][1] = __ldg(ep + (s_off[p] + s_next + g2));
      ahead_pair[p] = __ldg(reinterpret_cast<const float2*>(ep + (z_off[p] + g2)));
    }
  };
  const auto take = [&] {
#pragma unroll
    for (int p = 0; p < Parts; ++p) {
      sc[p][0] = ahead_s[p][0];
      sc[p][1] = ahead_s[p][1];
      const uint32_t z =
          static_cast<uint32_t>(wna16_exact::zero_code(ahead_pair[p].x, ahead_pair[p].y));
      zm[p] = kViaF32 ? (wna16_exact::kMagicF32 | z) : wna16_exact::zero_magic_pair<kBf16>(z);
    }
  };
  float u[Parts][4] = {};
  const auto end_group = [&] {
#pragma unroll
    for (int p = 0; p < Parts; ++p) {
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        acc[p][c] = fmaf(sc[p][c & 1], u[p][c], acc[p][c]);
        u[p][c] = 0.0f;
      }
    }
  };
  // The group ended: its sums scaled into acc, the next group's values taken, the one after
  // loaded.
  const auto next_group = [&] {
    end_group();
    take();
    ++group;
    units_left = units_per_group;
    fetch(min(group + 1, last_group));
  };
  fetch(min(group, last_group));
  take();
  fetch(min(group + 1, last_group));

  const uint32_t zero = opaque_zero(s_end);  // round_landed
  for (int s0 = s_begin; s0 < s_end; s0 += kV) {
    uint4 wv[kV][Parts][kVecs];
#pragma unroll
    for (int v = 0; v < kV; ++v) {
      // Past the slice: the last step again (never used; no zero-fill moves).
      const int sl = min(s0 + v, s_end - 1);
#pragma unroll
      for (int p = 0; p < Parts; ++p) {
#pragma unroll
        for (int q = 0; q < kVecs; ++q) {
          wv[v][p][q] =
              decode::load_weights(wp[p] + static_cast<int64_t>(sl) * kStepWords + q * 128, policy);
        }
      }
    }
    const uint32_t landed = round_landed<kV * Parts * kVecs>(&wv[0][0][0], zero);
#pragma unroll
    for (int v = 0; v < kV; ++v) {
      const int s = s0 + v;
      if (s >= s_end) break;  // uniform over the warp
#pragma unroll
      for (int unit = 0; unit < 4; ++unit) {
        const int kc = s * 128 + unit * 32 + 2 * t;
        if constexpr (Bits == 4) {
          uint32_t a[2][4];
          unit_a<kHi>(a_lo, a_hi, kc, len_lo, len_hi, a);
          if (v == 0 && unit == 0) a[0][0] |= landed;
#pragma unroll
          for (int p = 0; p < Parts; ++p) {
            const uint32_t words[4] = {wv[v][p][0].x, wv[v][p][0].y, wv[v][p][0].z, wv[v][p][0].w};
            uint32_t b[2][2];
            wna16_exact::int4_magic_pairs<kBf16>(words[unit], b);
#pragma unroll
            for (int m = 0; m < 2; ++m) {
              const uint32_t bm[2] = {wna16::sub_pair<T>(b[m][0], zm[p]),
                                      wna16::sub_pair<T>(b[m][1], zm[p])};
              grouped_gemm::mma_16816<T>(u[p], a[m], bm);
            }
          }
        } else {
#pragma unroll
          for (int half = 0; half < 2; ++half) {
            const int k = kc + 16 * half;
            const uint32_t a[4] = {
                a_pair(a_lo, k, len) | (v == 0 && unit == 0 && half == 0 ? landed : 0u),
                kHi ? a_pair(a_hi, k, len) : 0u, a_pair(a_lo, k + 8, len),
                kHi ? a_pair(a_hi, k + 8, len) : 0u};
#pragma unroll
            for (int p = 0; p < Parts; ++p) {
              const uint4& vec = wv[v][p][unit / 2];
              const uint32_t words[4] = {vec.x, vec.y, vec.z, vec.w};
              const uint32_t word = words[(2 * unit + half) & 3];
              uint32_t b[2];
              int8_exact_pairs<T>(word, zm[p], b);
              grouped_gemm::mma_16816<T>(u[p], a, b);
            }
          }
        }
        if constexpr (!kStepGroups) {
          if (--units_left == 0) next_group();  // uniform over the warp
        }
      }
      if constexpr (kStepGroups) {
        // units_left is a multiple of 4 (channel-wise: INT_MAX, never reaching 0 in a slice).
        units_left -= 4;
        if (units_left == 0) next_group();  // uniform over the warp
      }
    }
  }
  end_group();  // the slice's last (or only) group; adds zeros when it just ended
}

// The B operands of one unit's two k16 mmas with the operands swapped (warp_block16_gemm_*): pair
// g's x (a T row of `len` elements, 0: none) at k = 32 u + 2t in int4_magic_pairs' k order
// (permute_a's rows g, as registers 0 and 2).
template <typename T>
__device__ __forceinline__ void unit_x_b(const T* x_row, int k, int len, uint32_t (&xb)[2][2]) {
  uint32_t nat[4];
  unit_pairs(x_row, k, len, nat);
#pragma unroll
  for (int m = 0; m < 2; ++m) {
    xb[m][0] = __byte_perm(nat[m], nat[m + 2], 0x5410);
    xb[m][1] = __byte_perm(nat[m], nat[m + 2], 0x7632);
  }
}

// Integer codes through the exact path with the mma's operands swapped, for groups of at most 8
// pairs
// (PairRows 8: up to 8 tokens). warp_block_gemm_exact makes one 8-row block the B operand (n8)
// and the pairs the 16-row A operand, whose rows 8..15 are then zeros at M <= 8: half of every
// mma, and half of the x loads and permutes a weight costs, go to rows that hold nothing (the
// session 21 SASS of one round of the qwen3 M = 1 up kernel: 64 HMMA in 1017 instructions, 176
// of them register moves, most re-zeroing those rows). Here the weights of TWO adjacent 8-row
// blocks (lo = block, hi = block + 1) are the A operand (rows g and g + 8: each lane's own 16
// bytes of both, which the packed layout already hands it as B fragments) and the x rows of the
// pairs the B operand (n8: pair g, the lane's row, in the exact paths' permuted k order), so
// per weight: half the mmas, half the x loads and permutes, no zero registers, and the group
// end's scale pairs are the lane's own rows' (the pair that gives z also gives s: 2 loads a part
// instead of 3). C element c of lane (g, t) is weight row g (c < 2: lo block, else hi) of pair
// column 2t + (c & 1). !has_hi (no block after lo in the item's range): the hi rows read the lo
// block again and their C rows are not used. A round holds half the steps of
// warp_block_gemm_exact's (two blocks' words in the same 32 registers). INT8: each 16-wide half
// of a unit is one mma, with x in its natural k order (no permute), as warp_block_gemm_exact's.
template <typename T, int Bits, int Parts, bool kStepGroups>
__device__ __forceinline__ void warp_block16_gemm_exact(float (&acc)[Parts][4],
                                                        const Wna16Weights& w, int expert,
                                                        int block, bool has_hi, int s_begin,
                                                        int s_end, const T* x_row, int len,
                                                        uint64_t policy) {
  constexpr bool kBf16 = std::is_same_v<T, __nv_bfloat16>;
  constexpr int kW = Bits == 4 ? 4 : 8;  // words per lane, block and step
  constexpr int kVecs = kW / 4;          // 16-byte loads per lane, block and step
  constexpr int kStepWords = 32 * kW;
  constexpr int kV = kStepsInFlight<Bits, Parts> / 2;
  // INT8 with BF16: q - z through F32 (int8_exact_pairs).
  constexpr bool kViaF32 = Bits == 8 && kBf16;
  const int lane = static_cast<int>(threadIdx.x & 31);
  const int g_row = lane >> 2, t = lane & 3;
  const int k_steps = static_cast<int>(w.k_steps);
  const int64_t rows_padded = Parts * w.part_rows;
  const int64_t expert_blocks = static_cast<int64_t>(expert) * (rows_padded / 8);
  const int64_t groups = w.groups;
  const int len_x = x_row == nullptr ? 0 : len;  // a pair column past the pairs: zeros
  const int hi_block = has_hi ? 1 : 0;

  const uint32_t* wp[Parts][2];
  // The expert's {s, -z·s} pairs, and the lane's rows g of both blocks in them as 32-bit float
  // offsets (warp_block_gemm_exact's reason; weights_check bounds them).
  const float* ep = opaque(w.params + expert_blocks * 8 * groups * 2);
  uint32_t r_off[Parts][2];
  const uint32_t s_next = static_cast<uint32_t>(2 * groups);
#pragma unroll
  for (int p = 0; p < Parts; ++p) {
    const int64_t row_block = expert_blocks + p * w.part_rows / 8 + block;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      wp[p][h] = w.words + (row_block + h * hi_block) * k_steps * kStepWords + lane * 4;
      const uint32_t row = static_cast<uint32_t>(p * w.part_rows + (block + h * hi_block) * 8);
      r_off[p][h] = (row + g_row) * s_next;
    }
  }
  // The group of each step (groups of 32 / 64 columns: of each unit), followed with a counter as
  // warp_block_gemm_exact's.
  const int units_per_group = groups == 1 ? INT_MAX : static_cast<int>(w.group_size / 32);
  const int last_group = static_cast<int>(groups) - 1;
  int group = groups == 1 ? 0 : 4 * s_begin / units_per_group;
  int units_left = groups == 1 ? INT_MAX : units_per_group - 4 * s_begin % units_per_group;
  {
    const int g_first = min(group, last_group);
    const int g_last = groups == 1 ? 0 : min((4 * s_end - 1) / units_per_group, last_group);
#pragma unroll
    for (int p = 0; p < Parts; ++p) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const uintptr_t first =
            reinterpret_cast<uintptr_t>(ep + r_off[p][h] + 2 * g_first) & ~uintptr_t{127};
        const uintptr_t last = reinterpret_cast<uintptr_t>(ep + r_off[p][h] + 2 * g_last);
        for (uintptr_t line = first; line <= last; line += 128) {
          asm volatile("prefetch.global.L1 [%0];" ::"l"(line));
        }
      }
    }
  }
  float sc[Parts][2];  // s of the lane's rows (C elements 0, 1: lo; 2, 3: hi)
  uint32_t zm[Parts][2];
  float2 ahead[Parts][2];  // the next group's pairs, loaded a group ahead (warp_block_gemm_exact)
  const auto fetch = [&](int gi) {
#pragma unroll
    for (int p = 0; p < Parts; ++p) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        ahead[p][h] = __ldg(
            reinterpret_cast<const float2*>(ep + (r_off[p][h] + 2 * static_cast<uint32_t>(gi))));
      }
    }
  };
  const auto take = [&] {
#pragma unroll
    for (int p = 0; p < Parts; ++p) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        sc[p][h] = ahead[p][h].x;
        const uint32_t z =
            static_cast<uint32_t>(wna16_exact::zero_code(ahead[p][h].x, ahead[p][h].y));
        zm[p][h] = kViaF32 ? (wna16_exact::kMagicF32 | z) : wna16_exact::zero_magic_pair<kBf16>(z);
      }
    }
  };
  float u[Parts][4] = {};
  const auto end_group = [&] {
#pragma unroll
    for (int p = 0; p < Parts; ++p) {
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        acc[p][c] = fmaf(sc[p][c >> 1], u[p][c], acc[p][c]);
        u[p][c] = 0.0f;
      }
    }
  };
  const auto next_group = [&] {
    end_group();
    take();
    ++group;
    units_left = units_per_group;
    fetch(min(group + 1, last_group));
  };
  fetch(min(group, last_group));
  take();
  fetch(min(group + 1, last_group));

  const uint32_t zero = opaque_zero(s_end);  // round_landed
  for (int s0 = s_begin; s0 < s_end; s0 += kV) {
    uint4 wv[kV][Parts][2][kVecs];
#pragma unroll
    for (int v = 0; v < kV; ++v) {
      const int sl = min(s0 + v, s_end - 1);  // past the slice: the last step again (unused)
#pragma unroll
      for (int p = 0; p < Parts; ++p) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
#pragma unroll
          for (int q = 0; q < kVecs; ++q) {
            wv[v][p][h][q] = decode::load_weights(
                wp[p][h] + static_cast<int64_t>(sl) * kStepWords + q * 128, policy);
          }
        }
      }
    }
    const uint32_t landed = round_landed<kV * Parts * 2 * kVecs>(&wv[0][0][0][0], zero);
#pragma unroll
    for (int v = 0; v < kV; ++v) {
      const int s = s0 + v;
      if (s >= s_end) break;  // uniform over the warp
#pragma unroll
      for (int unit = 0; unit < 4; ++unit) {
        if constexpr (Bits == 4) {
          uint32_t xb[2][2];
          unit_x_b(x_row, s * 128 + unit * 32 + 2 * t, len_x, xb);
          if (v == 0 && unit == 0) xb[0][0] |= landed;
#pragma unroll
          for (int p = 0; p < Parts; ++p) {
            const uint4& lv = wv[v][p][0][0];
            const uint4& hv = wv[v][p][1][0];
            const uint32_t lo_words[4] = {lv.x, lv.y, lv.z, lv.w};
            const uint32_t hi_words[4] = {hv.x, hv.y, hv.z, hv.w};
            uint32_t lo[2][2], hi[2][2];
            wna16_exact::int4_magic_pairs<kBf16>(lo_words[unit], lo);
            wna16_exact::int4_magic_pairs<kBf16>(hi_words[unit], hi);
#pragma unroll
            for (int m = 0; m < 2; ++m) {
              // A rows g (lo) and g + 8 (hi) at k (2t, 2t + 1) and (2t + 8, 2t + 9) of mma m.
              const uint32_t a[4] = {
                  wna16::sub_pair<T>(lo[m][0], zm[p][0]), wna16::sub_pair<T>(hi[m][0], zm[p][1]),
                  wna16::sub_pair<T>(lo[m][1], zm[p][0]), wna16::sub_pair<T>(hi[m][1], zm[p][1])};
              grouped_gemm::mma_16816<T>(u[p], a, xb[m]);
            }
          }
        } else {
#pragma unroll
          for (int half = 0; half < 2; ++half) {
            const int k = s * 128 + unit * 32 + half * 16 + 2 * t;
            const uint32_t xb[2] = {
                a_pair(x_row, k, len_x) | (v == 0 && unit == 0 && half == 0 ? landed : 0u),
                a_pair(x_row, k + 8, len_x)};
#pragma unroll
            for (int p = 0; p < Parts; ++p) {
              // Word 2 unit + half of the step's 8 (two vectors) of each block.
              uint32_t lo[2], hi[2];
              const uint4& lv = wv[v][p][0][unit / 2];
              const uint4& hv = wv[v][p][1][unit / 2];
              const uint32_t lo_words[4] = {lv.x, lv.y, lv.z, lv.w};
              const uint32_t hi_words[4] = {hv.x, hv.y, hv.z, hv.w};
              int8_exact_pairs<T>(lo_words[(2 * unit + half) & 3], zm[p][0], lo);
              int8_exact_pairs<T>(hi_words[(2 * unit + half) & 3], zm[p][1], hi);
              const uint32_t a[4] = {lo[0], hi[0], lo[1], hi[1]};
              grouped_gemm::mma_16816<T>(u[p], a, xb);
            }
          }
        }
        if constexpr (!kStepGroups) {
          if (--units_left == 0) next_group();  // uniform over the warp
        }
      }
      if constexpr (kStepGroups) {
        units_left -= 4;  // a multiple of 4 (channel-wise: INT_MAX, never reaching 0)
        if (units_left == 0) next_group();  // uniform over the warp
      }
    }
  }
  end_group();  // the slice's last (or only) group
}

// FP4 codes (MXFP4, NVFP4): acc[part] += the same C fragment as warp_block_gemm's, the E2M1
// values placed bit for bit into T (wna16_exact::e2m1_placed_pairs: 15 bit instructions and 4
// HMUL2 for 8 values (BF16 MXFP4; NVFP4 8), against ~4-5 a value through the per-value Dequant)
// in int4_magic_pairs' order (the A registers permuted as warp_block_gemm_exact's), and the
// scales applied without rounding anything:
//   in T (BF16 MXFP4, NVFP4): the B values times the scale pair of the lane's weight row g (one
//          HMUL2 a register; a B register's halves are nibbles j and j + 4, one from each 16-wide
//          half of the unit, so NVFP4's pair is (half 0, half 1)): exact, as BF16 holds every
//          E8M0 power of two (F32's exponent range) and 2^(e - 127) · e2m1 or 2·e2m1 · e4m3 has at
//          most 6 significant bits; the per-value path's values bit for bit (NVFP4's part global
//          / 2 multiplies the result as before; BF16 MXFP4 takes w · 2^-shift, made real by
//          wna16::fp4_sum_scale, which at shift 0, every scale at most 2, is the same bits);
//   on the accumulator (F16 MXFP4: its range holds few E8M0 powers): the two mmas of a unit sum
//          U = Σ x e2m1 of its one scale group, and each C element (pair row, weight row 2t or
//          2t + 1) gets acc += 2^(e - 127) · U with its weight row's code (the lane loads rows 2t
//          and 2t + 1's scale bytes): exact but for the fp32 sums.
// `staged` (kStaged): x as stage_x_units left it, read instead of a_lo (a_hi is never set then).
template <typename T, Wna16Codes Codes, int Parts, bool kHi, bool kStaged = false>
__device__ __forceinline__ void warp_block_gemm_e2m1(float (&acc)[Parts][4], const Wna16Weights& w,
                                                     int expert, int block, int s_begin, int s_end,
                                                     const T* a_lo, const T* a_hi, int len,
                                                     uint64_t policy,
                                                     const uint4* staged = nullptr) {
  static_assert(!(kStaged && kHi), "a staged row is A row g only");
  static_assert(Codes != Wna16Codes::kInteger);
  constexpr bool kBf16 = std::is_same_v<T, __nv_bfloat16>;
  constexpr bool kMx = Codes == Wna16Codes::kMxfp4;
  constexpr bool kScaleInT = wna16::kFp4ScaleInT<T, Codes>;
  constexpr int kStepWords = 32 * 4;                      // one 16-byte load a lane and step
  constexpr int kScaleBytes = kScaleBytesPerStep<Codes>;  // a row's per step: 4 (MX) / 8 (NV)
  constexpr int kV = kE2m1RoundSteps<Parts>;
  constexpr uint32_t kUnbias = wna16_exact::kE2M1Unbias<kBf16, !kMx>;
  [[maybe_unused]] const uint32_t mx_bias = wna16_exact::e8m0_unbias_bias(w.e8m0_shift);
  // The scale bytes a lane loads per step: MXFP4 in T row g's 4 (one word); on the accumulator
  // rows 2t and 2t + 1's (8); NVFP4 row g's 8.
  using ScaleWords = std::conditional_t<kMx && kScaleInT, uint32_t, uint2>;
  const int lane = static_cast<int>(threadIdx.x & 31);
  const int g_row = lane >> 2, t = lane & 3;
  const int k_steps = static_cast<int>(w.k_steps);
  const int64_t rows_padded = Parts * w.part_rows;
  const int64_t expert_blocks = static_cast<int64_t>(expert) * (rows_padded / 8);
  // A row past the pairs reads nothing (zeros).
  [[maybe_unused]] const int len_lo = a_lo == nullptr ? 0 : len;
  [[maybe_unused]] const int len_hi = a_hi == nullptr ? 0 : len;

  const uint32_t* wp[Parts];
  const ScaleWords* sp[Parts];
#pragma unroll
  for (int p = 0; p < Parts; ++p) {
    const int64_t row_block = expert_blocks + p * w.part_rows / 8 + block;
    wp[p] = w.words + row_block * k_steps * kStepWords + lane * 4;
    sp[p] = reinterpret_cast<const ScaleWords*>(w.scale_bytes +
                                                row_block * k_steps * (8 * kScaleBytes) +
                                                (kScaleInT ? g_row : 2 * t) * kScaleBytes);
  }
  constexpr int kScaleStep = 8 * kScaleBytes / static_cast<int>(sizeof(ScaleWords));

  const uint32_t zero = opaque_zero(s_end);  // round_landed
  for (int s0 = s_begin; s0 < s_end; s0 += kV) {
    uint4 wv[kV][Parts];
    ScaleWords sv[kV][Parts];
#pragma unroll
    for (int v = 0; v < kV; ++v) {
      // Past the slice: the last step again (never used; no zero-fill moves).
      const int sl = min(s0 + v, s_end - 1);
#pragma unroll
      for (int p = 0; p < Parts; ++p) {
        wv[v][p] = decode::load_weights(wp[p] + static_cast<int64_t>(sl) * kStepWords, policy);
        sv[v][p] = __ldg(sp[p] + static_cast<int64_t>(sl) * kScaleStep);
      }
    }
    // The round's codes and scale words all land before its first mma (round_landed).
    uint32_t landed = round_landed<kV * Parts>(&wv[0][0], zero);
#pragma unroll
    for (int v = 0; v < kV; ++v) {
#pragma unroll
      for (int p = 0; p < Parts; ++p) {
        if constexpr (std::is_same_v<ScaleWords, uint32_t>) {
          landed |= sv[v][p] & zero;
        } else {
          landed |= (sv[v][p].x | sv[v][p].y) & zero;
        }
      }
    }
#pragma unroll
    for (int v = 0; v < kV; ++v) {
      const int s = s0 + v;
      if (s >= s_end) break;  // uniform over the warp
#pragma unroll
      for (int unit = 0; unit < 4; ++unit) {
        uint32_t a[2][4];
        if constexpr (kStaged) {
          staged_unit_a(staged, s, unit, a);
        } else {
          unit_a<kHi>(a_lo, a_hi, s * 128 + unit * 32 + 2 * t, len_lo, len_hi, a);
        }
        if (v == 0 && unit == 0) a[0][0] |= landed;
#pragma unroll
        for (int p = 0; p < Parts; ++p) {
          const uint32_t words[4] = {wv[v][p].x, wv[v][p].y, wv[v][p].z, wv[v][p].w};
          uint32_t b[2][2];
          if constexpr (kScaleInT) {
            uint2 bytes;
            if constexpr (kMx) {
              bytes = make_uint2(sv[v][p], 0u);
            } else {
              bytes = sv[v][p];
            }
            wna16::fp4_placed_fragments<T, Codes>(
                words[unit], wna16::fp4_scale_pair<T, Codes>(bytes, unit, mx_bias), b);
#pragma unroll
            for (int m = 0; m < 2; ++m) {
              grouped_gemm::mma_16816<T>(acc[p], a[m], b[m]);
            }
          } else {
            wna16_exact::e2m1_placed_pairs<kBf16>(words[unit], b);
            float u[4] = {};
#pragma unroll
            for (int m = 0; m < 2; ++m) {
              const uint32_t bm[2] = {wna16::mul_pair<T>(b[m][0], kUnbias),
                                      wna16::mul_pair<T>(b[m][1], kUnbias)};
              grouped_gemm::mma_16816<T>(u, a[m], bm);
            }
            const float s_even = __uint_as_float(wna16_exact::e8m0_scale_bits(sv[v][p].x, unit));
            const float s_odd = __uint_as_float(wna16_exact::e8m0_scale_bits(sv[v][p].y, unit));
#pragma unroll
            for (int c = 0; c < 4; ++c) acc[p][c] = fmaf(c & 1 ? s_odd : s_even, u[c], acc[p][c]);
          }
        }
      }
    }
  }
}

// FP4 codes whose scales T holds (wna16::kFp4ScaleInT: BF16 MXFP4, NVFP4) with the operands
// swapped as warp_block16_gemm_exact's: the placed and scaled values of rows g of the lo and hi
// blocks (wna16::fp4_placed_fragments, each with its own row's scale pair) are the A operand,
// pair g's x the B operand. The loads keep warp_block_gemm_e2m1's schedule (its register limits).
// NVFP4's part global / 2 is the caller's, as there.
template <typename T, Wna16Codes Codes, int Parts>
__device__ __forceinline__ void warp_block16_gemm_e2m1(float (&acc)[Parts][4],
                                                       const Wna16Weights& w, int expert, int block,
                                                       bool has_hi, int s_begin, int s_end,
                                                       const T* x_row, int len, uint64_t policy) {
  static_assert(wna16::kFp4ScaleInT<T, Codes>);
  constexpr bool kMx = Codes == Wna16Codes::kMxfp4;
  [[maybe_unused]] const uint32_t mx_bias = wna16_exact::e8m0_unbias_bias(w.e8m0_shift);
  constexpr int kStepWords = 32 * 4;                      // one 16-byte load a lane and step
  constexpr int kScaleBytes = kScaleBytesPerStep<Codes>;  // a row's per step: 4 (MX) / 8 (NV)
  constexpr int kV = kStepsInFlight<4, Parts> / 2;
  using ScaleWords = std::conditional_t<kMx, uint32_t, uint2>;
  constexpr int kScaleStep = 8 * kScaleBytes / static_cast<int>(sizeof(ScaleWords));
  const int lane = static_cast<int>(threadIdx.x & 31);
  const int g_row = lane >> 2, t = lane & 3;
  const int k_steps = static_cast<int>(w.k_steps);
  const int64_t rows_padded = Parts * w.part_rows;
  const int64_t expert_blocks = static_cast<int64_t>(expert) * (rows_padded / 8);
  const int len_x = x_row == nullptr ? 0 : len;
  const int hi_block = has_hi ? 1 : 0;

  const uint32_t* wp[Parts][2];
  const ScaleWords* sp[Parts][2];
#pragma unroll
  for (int p = 0; p < Parts; ++p) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t row_block = expert_blocks + p * w.part_rows / 8 + block + h * hi_block;
      wp[p][h] = w.words + row_block * k_steps * kStepWords + lane * 4;
      sp[p][h] = reinterpret_cast<const ScaleWords*>(
          w.scale_bytes + row_block * k_steps * (8 * kScaleBytes) + g_row * kScaleBytes);
    }
  }

  for (int s0 = s_begin; s0 < s_end; s0 += kV) {
    uint4 wv[kV][Parts][2];
    ScaleWords sv[kV][Parts][2];
#pragma unroll
    for (int v = 0; v < kV; ++v) {
      const int sl = min(s0 + v, s_end - 1);  // past the slice: the last step again (unused)
#pragma unroll
      for (int p = 0; p < Parts; ++p) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          wv[v][p][h] =
              decode::load_weights(wp[p][h] + static_cast<int64_t>(sl) * kStepWords, policy);
          sv[v][p][h] = __ldg(sp[p][h] + static_cast<int64_t>(sl) * kScaleStep);
        }
      }
    }
#pragma unroll
    for (int v = 0; v < kV; ++v) {
      const int s = s0 + v;
      if (s >= s_end) break;  // uniform over the warp
#pragma unroll
      for (int unit = 0; unit < 4; ++unit) {
        uint32_t xb[2][2];
        unit_x_b(x_row, s * 128 + unit * 32 + 2 * t, len_x, xb);
#pragma unroll
        for (int p = 0; p < Parts; ++p) {
          uint32_t b[2][2][2];  // [h][m][r]
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const uint32_t words[4] = {wv[v][p][h].x, wv[v][p][h].y, wv[v][p][h].z, wv[v][p][h].w};
            uint2 bytes;
            if constexpr (kMx) {
              bytes = make_uint2(sv[v][p][h], 0u);
            } else {
              bytes = sv[v][p][h];
            }
            wna16::fp4_placed_fragments<T, Codes>(
                words[unit], wna16::fp4_scale_pair<T, Codes>(bytes, unit, mx_bias), b[h]);
          }
#pragma unroll
          for (int m = 0; m < 2; ++m) {
            const uint32_t a[4] = {b[0][m][0], b[1][m][0], b[0][m][1], b[1][m][1]};
            grouped_gemm::mma_16816<T>(acc[p], a, xb[m]);
          }
        }
      }
    }
  }
}

// The swapped-operand block GEMM of a code kind (swapped_operands says which take it).
template <typename T, int Bits, Wna16Codes Codes, IntPath Path, int Parts>
__device__ __forceinline__ void block16_gemm(float (&acc)[Parts][4], const Wna16Weights& w,
                                             int expert, int block, bool has_hi, int s_begin,
                                             int s_end, const T* x_row, int len, uint64_t policy) {
  if constexpr (Codes == Wna16Codes::kInteger) {
    warp_block16_gemm_exact<T, Bits, Parts, Path == IntPath::kExactSteps>(
        acc, w, expert, block, has_hi, s_begin, s_end, x_row, len, policy);
  } else {
    warp_block16_gemm_e2m1<T, Codes, Parts>(acc, w, expert, block, has_hi, s_begin, s_end, x_row,
                                            len, policy);
  }
}

// The kinds the swapped kernels are instantiated for: integer codes on an exact path, FP4 scaled in
// T.
template <typename T, int Bits, Wna16Codes Codes, IntPath Path>
inline constexpr bool kSwappable =
    Codes == Wna16Codes::kInteger ? Path != IntPath::kPerValue : wna16::kFp4ScaleInT<T, Codes>;

// The block GEMM of a code kind: FP4 codes take warp_block_gemm_e2m1; integer codes by Path
// (IntPath, chosen at launch by int_path): warp_block_gemm_exact or the per-value
// dequantization.
template <typename T, int Bits, Wna16Codes Codes, IntPath Path, int Parts, bool kHi,
          bool kStaged = false>
__device__ __forceinline__ void block_gemm(float (&acc)[Parts][4], const Wna16Weights& w,
                                           int expert, int block, int s_begin, int s_end,
                                           const T* a_lo, const T* a_hi, int len, uint64_t policy,
                                           const uint4* staged = nullptr) {
  static_assert(!kStaged || Codes != Wna16Codes::kInteger, "x is staged for FP4 codes only");
  if constexpr (Codes != Wna16Codes::kInteger) {
    warp_block_gemm_e2m1<T, Codes, Parts, kHi, kStaged>(acc, w, expert, block, s_begin, s_end, a_lo,
                                                        a_hi, len, policy, staged);
  } else if constexpr (Path != IntPath::kPerValue) {
    warp_block_gemm_exact<T, Bits, Parts, kHi, Path == IntPath::kExactSteps>(
        acc, w, expert, block, s_begin, s_end, a_lo, a_hi, len, policy);
  } else {
    warp_block_gemm<T, Bits, Parts, kHi>(acc, w, expert, block, s_begin, s_end, a_lo, a_hi, len,
                                         policy);
  }
}

// The pairs of pair group [first, first + count) of the grouped pairs, as lane (g, t) sees them:
// pair g (A row g) and pair g + 8 (A row g + 8), -1 past count.
struct LanePairs {
  int lo = -1, hi = -1;
};

__device__ __forceinline__ LanePairs lane_pairs(const decode::PairGroups& g, int first, int count) {
  const int g_row = static_cast<int>((threadIdx.x & 31) >> 2);
  LanePairs lp;
  if (g_row < count) lp.lo = g.pair[first + g_row];
  if (g_row + 8 < count) lp.hi = g.pair[first + g_row + 8];
  return lp;
}

// The 128-wide K steps [begin, end) of slice `slice` of `slices` (contiguous, equal but the
// last; empty when past the steps).
struct StepRange {
  int begin = 0, end = 0;
};
__device__ __forceinline__ StepRange slice_steps(int k_steps, int slices, int slice) {
  const int per = (k_steps + slices - 1) / slices;
  StepRange r;
  r.begin = min(k_steps, slice * per);
  r.end = min(k_steps, r.begin + per);
  return r;
}

// Registers of an up kernel's thread at most: 128 lets a CTA of kMaxThreads run; FP4's gated up
// kernel wants 82-101 (ptxas, CUDA 13.0), which leaves two 8-warp CTAs an SM, and at 80 three
// fit (28-108 bytes of spill stores, ptxas): gpt-oss-120b MXFP4 on the H200 (session 13, the timing
// test) M = 1 58.5 -> 52.2 us, M = 16 514.4 -> 479.6 (its 360 CTAs in one wave instead of 1.36).
template <Wna16Codes Codes>
inline constexpr int kUpMaxRegisters = Codes == Wna16Codes::kInteger ? 128 : 80;

struct UpParams {
  const void* x = nullptr;  // [tokens, hidden] T
  const int32_t* topk_ids = nullptr;
  decode::LocalExperts experts{};
  Wna16Weights w13;
  const float* b13 = nullptr;  // [E, N1] F32
  void* act = nullptr;         // [num_pairs, inter] T
  int num_pairs = 0, top_k = 0, hidden = 0, inter = 0;
  int k_slices = 1;        // warps per 8-row block, each a K slice
  int blocks_per_cta = 1;  // 8-row blocks per CTA: blockDim.x = 32 * blocks_per_cta * k_slices
  // Entries of x staged in shared memory (stage_x_units: kStagedEntriesPerStep a K step) ahead of
  // the slices' partial sums: FP4 codes, one token, not swapped; 0: x is read from global memory.
  int staged_x = 0;
  bool evict_first = true;
  MoEActParams act_params;
};

// act[p, c] = act_fn(gate[p, c], up[p, c]) for the CTA's blocks of columns c and its experts.
// Warp w is slice w % k_slices of block blockIdx.x * blocks_per_cta + w / k_slices; the slices
// of a block leave their gate and up accumulators in shared memory and the block's slice-0 warp
// sums them in slice order, then applies the activation.
template <typename T, int Bits, Wna16Codes Codes, bool Gated, int PairRows, IntPath Path,
          bool Swapped = false>
__global__ void __maxnreg__(kUpMaxRegisters<Codes>) wna16_decode_up_kernel(const UpParams p) {
  static_assert(PairRows == 8 || PairRows == kMaxPairRows);
  static_assert(!Swapped || (kSwappable<T, Bits, Codes, Path> && PairRows == 8));
  constexpr int kParts = Gated ? 2 : 1;
  __shared__ decode::PairGroups g;
  // Dynamic shared memory: the staged x (p.staged_x entries), then [warp][part][c][lane]: a
  // warp's C fragments, each element written and read by one lane (conflict-free); only when
  // k_slices > 1.
  extern __shared__ uint4 up_shared[];
  uint4* staged = up_shared;
  float* partial = reinterpret_cast<float*>(up_shared + p.staged_x);
  // Programmatic dependent launch (framework/device/cuda/pdl.cuh): topk_ids / x come from the
  // kernels before.
  pdl_wait();
  pdl_launch_dependents();
  constexpr bool kCanStage = Codes != Wna16Codes::kInteger && !Swapped && PairRows == 8;
  if constexpr (kCanStage) {
    // group_pairs' barrier publishes it.
    if (p.staged_x > 0) stage_x_units(staged, p.staged_x, static_cast<const T*>(p.x), p.hidden);
  }
  decode::group_pairs(g, p.topk_ids, p.experts, p.num_pairs);

  const int warp = static_cast<int>(threadIdx.x / 32);
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int slice = warp % p.k_slices;
  // Swapped: 16-row blocks (block16_gemm), act columns 16 block .. + 15.
  constexpr int kBlockRows = Swapped ? 16 : 8;
  const int block = static_cast<int>(blockIdx.x) * p.blocks_per_cta + warp / p.k_slices;
  // A warp past the last block still takes part in every barrier below (no early return).
  const bool has_block = block * kBlockRows < p.inter;
  const StepRange steps = slice_steps(static_cast<int>(p.w13.k_steps), p.k_slices, slice);
  const uint64_t policy = decode::weight_policy(p.evict_first);
  const T* x = static_cast<const T*>(p.x);
  T* act = static_cast<T*>(p.act);
  const int64_t n1 = Gated ? 2 * static_cast<int64_t>(p.inter) : p.inter;
  const int col = block * 8 + (lane & 3) * 2;  // this lane's act columns col, col + 1

  for (int u = static_cast<int>(blockIdx.y); u < g.num_experts; u += static_cast<int>(gridDim.y)) {
    const int e = g.expert[u];
    const int group_end = g.offset[u + 1];
    for (int first = g.offset[u]; first < group_end; first += PairRows) {
      const LanePairs lp = lane_pairs(g, first, min(PairRows, group_end - first));
      const T* a_lo = lp.lo < 0 ? nullptr : x + static_cast<int64_t>(lp.lo / p.top_k) * p.hidden;
      const T* a_hi = lp.hi < 0 ? nullptr : x + static_cast<int64_t>(lp.hi / p.top_k) * p.hidden;
      float acc[kParts][4] = {};
      if (has_block && steps.begin < steps.end) {  // uniform over the warp
        if constexpr (Swapped) {
          block16_gemm<T, Bits, Codes, Path, kParts>(acc, p.w13, e, 2 * block,
                                                     block * 16 + 8 < p.inter, steps.begin,
                                                     steps.end, a_lo, p.hidden, policy);
        } else if (PairRows > 8 && group_end - first > 8) {
          block_gemm<T, Bits, Codes, Path, kParts, true>(acc, p.w13, e, block, steps.begin,
                                                         steps.end, a_lo, a_hi, p.hidden, policy);
        } else if (kCanStage && p.staged_x > 0) {
          block_gemm<T, Bits, Codes, Path, kParts, false, kCanStage>(
              acc, p.w13, e, block, steps.begin, steps.end, a_lo, a_hi, p.hidden, policy, staged);
        } else {
          block_gemm<T, Bits, Codes, Path, kParts, false>(acc, p.w13, e, block, steps.begin,
                                                          steps.end, a_lo, a_hi, p.hidden, policy);
        }
      }
      if (p.k_slices > 1) {  // uniform over the CTA: the barriers are reached by every thread
#pragma unroll
        for (int q = 0; q < kParts; ++q) {
#pragma unroll
          for (int c = 0; c < 4; ++c) {
            partial[((warp * kParts + q) * 4 + c) * 32 + lane] = acc[q][c];
          }
        }
        __syncthreads();
        if (slice == 0) {
          for (int s = 1; s < p.k_slices; ++s) {
#pragma unroll
            for (int q = 0; q < kParts; ++q) {
#pragma unroll
              for (int c = 0; c < 4; ++c) {
                acc[q][c] += partial[(((warp + s) * kParts + q) * 4 + c) * 32 + lane];
              }
            }
          }
        }
        __syncthreads();  // partial is rewritten by the next item
      }
      if (slice != 0 || !has_block) continue;

      // NVFP4: the accumulators hold sums of x · 2·e2m1 · e4m3; the part's global / 2 makes them
      // real.
      float part_scale[kParts];
#pragma unroll
      for (int q = 0; q < kParts; ++q) {
        part_scale[q] = Codes == Wna16Codes::kNvfp4 ? 0.5f * p.w13.globals[e * kParts + q]
                                                    : wna16::fp4_sum_scale<T, Codes>(p.w13);
      }
      if constexpr (Swapped) {
        // C element c: act column 16 block + 8 (c >> 1) + g of pair 2t + (c & 1) of the group.
        const int count = min(PairRows, group_end - first);
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          const int j = 2 * (lane & 3) + (c & 1);
          const int col16 = block * 16 + (c >> 1) * 8 + (lane >> 2);
          if (j >= count || col16 >= p.inter) continue;
          float gate = acc[0][c] * part_scale[0];
          float up = 0.0f;
          if constexpr (Gated) up = acc[kParts - 1][c] * part_scale[kParts - 1];
          if (p.b13 != nullptr) {
            gate += p.b13[e * n1 + col16];
            if constexpr (Gated) up += p.b13[e * n1 + p.inter + col16];
          }
          act[static_cast<int64_t>(g.pair[first + j]) * p.inter + col16] =
              from_float<T>(moe_activation(p.act_params, gate, up));
        }
      } else {
        if (col >= p.inter) continue;  // inter is a multiple of 8: col + 1 is in range too
#pragma unroll
        for (int half = 0; half < 2; ++half) {  // C rows g (pair lo) and g + 8 (pair hi)
          const int pair = half == 0 ? lp.lo : lp.hi;
          if (pair < 0) continue;
          float v[2];
#pragma unroll
          for (int c = 0; c < 2; ++c) {
            float gate = acc[0][2 * half + c] * part_scale[0];
            float up = 0.0f;
            if constexpr (Gated) up = acc[kParts - 1][2 * half + c] * part_scale[kParts - 1];
            if (p.b13 != nullptr) {
              gate += p.b13[e * n1 + col + c];
              if constexpr (Gated) up += p.b13[e * n1 + p.inter + col + c];
            }
            v[c] = moe_activation(p.act_params, gate, up);
          }
          grouped_gemm::store_pair(act + static_cast<int64_t>(pair) * p.inter + col, v[0], v[1]);
        }
      }
    }
  }
}

struct DownParams {
  const int32_t* topk_ids = nullptr;
  const float* topk_weights = nullptr;
  decode::LocalExperts experts{};
  Wna16Weights w2;
  const float* b2 = nullptr;  // [E, H] F32
  const void* act = nullptr;  // [num_pairs, inter] T
  void* out = nullptr;        // [num_tokens, hidden] T
  int num_pairs = 0, num_tokens = 0, top_k = 0, hidden = 0, inter = 0;
  int blocks_per_cta = 1;  // 8-row blocks of output columns h per CTA
  int k_slices = 1;        // K slices per (expert, pair group, block) item
  bool prefetch_l2 = false;
  bool evict_first = true;
};

// Registers of an FP4 down kernel's thread at most (wna16_decode_fp4_down_kernel): 80, so three
// 8-warp CTAs fit an SM (gpt-oss-120b's 360 down CTAs in one wave). It was 64 (four CTAs, through
// __launch_bounds__(kMaxThreads, 2)), at which the MXFP4 kernels spilled 56-72 bytes (ptxas,
// CUDA 13.0: 360 k local spill requests a launch under Nsight Compute); at 80 the one-token
// kernels spill none (the 16-pair-row and swapped ones 40-64 bytes). H200
// (session 25): the timing test (`MG_WNA16_TIMING=1 mg_cuda_tests
// --gtest_filter='CudaWna16Decode.Timing*'`), gpt-oss-120b MXFP4 M = 1 45.3 -> 43.1 µs, M = 16
// 393.1 -> 385.4; `bench e2e` of the 24-layer GPT-OSS-20B-shaped MXFP4 model 429.7 / 428.8 ->
// 440.7 / 440.4 tokens/s. (Before 64, ptxas had given the PairRows 16 MXFP4 kernel 82 registers
// with no cap, and at two CTAs an SM those 360 CTAs took 1.36 waves: M = 16 398 -> 460 µs.)
// The integer down kernels keep __launch_bounds__(kMaxThreads): ptxas takes up to 128 registers
// (111-128 for the BF16 ones, CUDA 13.0).
inline constexpr int kFp4DownMaxRegisters = 80;

// out[t, h] = sum_j w[t, j] (W2[e] act[t*k + j] + b2[e])[h] for the CTA's rows h: the body of the
// integer and FP4 down kernels below (their register limits differ).
template <typename T, int Bits, Wna16Codes Codes, int PairRows, IntPath Path, bool Swapped>
__device__ __forceinline__ void decode_down(const DownParams& p) {
  static_assert(PairRows == 8 || PairRows == kMaxPairRows);
  static_assert(!Swapped || (kSwappable<T, Bits, Codes, Path> && PairRows == 8));
  __shared__ decode::PairGroups g;
  extern __shared__ float partial[];  // [k_slices, num_pairs, rows_per_cta]
  // topk_ids and expert_map were complete before the up kernel triggered this launch (it does so
  // only after its own pdl_wait: pdl.cuh's one exception, as the BF16 down kernel); act is its
  // output.
  decode::group_pairs(g, p.topk_ids, p.experts, p.num_pairs);

  const int warps = static_cast<int>(blockDim.x / 32);
  const int warp = static_cast<int>(threadIdx.x / 32);
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int rows_per_cta = p.blocks_per_cta * 8;
  const int block0 = static_cast<int>(blockIdx.x) * p.blocks_per_cta;
  const int h0 = block0 * 8;
  const int rows = min(rows_per_cta, p.hidden - h0);
  const int blocks = (rows + 7) / 8;
  const int k_steps = static_cast<int>(p.w2.k_steps);

  // The weights do not depend on the up kernel: while it still streams W13, ask L2 for this
  // CTA's blocks of each touched expert, which the layout keeps contiguous (codes; scale bytes or
  // the rows' F32 pairs), one thread per expert. Weights only before pdl_wait (pdl.cuh).
  if (p.prefetch_l2) {
    constexpr int kStepBytes = 32 * (Bits == 4 ? 4 : 8) * 4;
    for (int u = static_cast<int>(threadIdx.x); u < g.num_experts;
         u += static_cast<int>(blockDim.x)) {
      const int64_t first_block = g.expert[u] * (p.w2.part_rows / 8) + block0;
      pdl_prefetch_l2(
          reinterpret_cast<const char*>(p.w2.words) + first_block * k_steps * kStepBytes,
          static_cast<int64_t>(blocks) * k_steps * kStepBytes, 0, 1);
      if constexpr (Codes == Wna16Codes::kInteger) {
        const int64_t pair_bytes = 2 * sizeof(float) * p.w2.groups;
        pdl_prefetch_l2(reinterpret_cast<const char*>(p.w2.params) + first_block * 8 * pair_bytes,
                        static_cast<int64_t>(rows) * pair_bytes, 0, 1);
      } else {
        constexpr int kScaleStepBytes = 8 * kScaleBytesPerStep<Codes>;
        pdl_prefetch_l2(p.w2.scale_bytes + first_block * k_steps * kScaleStepBytes,
                        static_cast<int64_t>(blocks) * k_steps * kScaleStepBytes, 0, 1);
      }
    }
  }
  pdl_wait();
  pdl_launch_dependents();  // the next kernel (the residual add + norm) may get resident
  const uint64_t policy = decode::weight_policy(p.evict_first);
  const T* act = static_cast<const T*>(p.act);

  // Items (expert, pair group, block, K slice), dealt to the warps in turn: warp w takes items
  // w, w + warps, ... Each (expert, pair group) holds blocks x k_slices items; the walk jumps over
  // whole groups and other warps' items with additions only (a division and the item's set-up per
  // item skipped cost every warp ~100 instructions an item: the SASS profile in
  // docs/performance.md). Every slice of every item writes its partial sums (zeros for an empty
  // slice), each element by exactly one lane.
  // Swapped: an item is two 8-row blocks of the CTA (block16_gemm), the second absent
  // in a last item of an odd count.
  const int item_blocks = Swapped ? (blocks + 1) / 2 : blocks;
  const int group_items = item_blocks * p.k_slices;
  int next = warp;  // this warp's next item
  int base = 0;     // the first item of the current (expert, pair group)
  for (int u = 0; u < g.num_experts; ++u) {
    const int e = g.expert[u];
    const int group_end = g.offset[u + 1];
    for (int first = g.offset[u]; first < group_end; first += PairRows, base += group_items) {
      if (next >= base + group_items) continue;
      const LanePairs lp = lane_pairs(g, first, min(PairRows, group_end - first));
      const T* a_lo = lp.lo < 0 ? nullptr : act + static_cast<int64_t>(lp.lo) * p.inter;
      const T* a_hi = lp.hi < 0 ? nullptr : act + static_cast<int64_t>(lp.hi) * p.inter;
      const bool hi = PairRows > 8 && group_end - first > 8;
      const float scale = Codes == Wna16Codes::kNvfp4 ? 0.5f * p.w2.globals[e]
                                                      : wna16::fp4_sum_scale<T, Codes>(p.w2);
      for (; next < base + group_items; next += warps) {
        const int b = p.k_slices == 1 ? next - base : (next - base) / p.k_slices;
        const int ks = next - base - b * p.k_slices;
        const StepRange steps = slice_steps(k_steps, p.k_slices, ks);
        float acc[1][4] = {};
        if constexpr (Swapped) {
          if (steps.begin < steps.end) {  // uniform over the warp
            block16_gemm<T, Bits, Codes, Path, 1>(acc, p.w2, e, block0 + 2 * b, 2 * b + 1 < blocks,
                                                  steps.begin, steps.end, a_lo, p.inter, policy);
          }
          // C element c: row 16 b + 8 (c >> 1) + g of the CTA, pair 2t + (c & 1) of the group.
          float* slice_partial = partial + static_cast<int64_t>(ks) * p.num_pairs * rows_per_cta;
          const int count = min(PairRows, group_end - first);
#pragma unroll
          for (int c = 0; c < 4; ++c) {
            const int j = 2 * (lane & 3) + (c & 1);
            const int r = b * 16 + (c >> 1) * 8 + (lane >> 2);
            if (j < count && r < rows) {
              slice_partial[g.pair[first + j] * rows_per_cta + r] = acc[0][c] * scale;
            }
          }
        } else {
          if (steps.begin < steps.end) {  // uniform over the warp
            if (hi) {
              block_gemm<T, Bits, Codes, Path, 1, true>(acc, p.w2, e, block0 + b, steps.begin,
                                                        steps.end, a_lo, a_hi, p.inter, policy);
            } else {
              block_gemm<T, Bits, Codes, Path, 1, false>(acc, p.w2, e, block0 + b, steps.begin,
                                                         steps.end, a_lo, a_hi, p.inter, policy);
            }
          }
          const int r = b * 8 + (lane & 3) * 2;  // this lane's rows r, r + 1 of the CTA
          float* slice_partial = partial + static_cast<int64_t>(ks) * p.num_pairs * rows_per_cta;
#pragma unroll
          for (int half = 0; half < 2; ++half) {
            const int pair = half == 0 ? lp.lo : lp.hi;
            if (pair < 0) continue;
#pragma unroll
            for (int c = 0; c < 2; ++c) {
              if (r + c < rows) {
                slice_partial[pair * rows_per_cta + r + c] = acc[0][2 * half + c] * scale;
              }
            }
          }
        }
      }
    }
  }
  __syncthreads();

  T* out = static_cast<T*>(p.out);
  const int slice_stride = p.num_pairs * rows_per_cta;
  for (int i = static_cast<int>(threadIdx.x); i < p.num_tokens * rows;
       i += static_cast<int>(blockDim.x)) {
    const int t = i / rows;
    const int r = i - t * rows;
    const int64_t h = h0 + r;
    float sum = 0.0f;
    for (int j = 0; j < p.top_k; ++j) {
      const int pr = t * p.top_k + j;
      const int e = g.local[pr];
      if (e < 0) continue;
      float y = partial[pr * rows_per_cta + r];
      for (int ks = 1; ks < p.k_slices; ++ks)
        y += partial[ks * slice_stride + pr * rows_per_cta + r];
      if (p.b2 != nullptr) y += p.b2[e * static_cast<int64_t>(p.hidden) + h];
      sum += p.topk_weights[pr] * y;
    }
    out[t * static_cast<int64_t>(p.hidden) + h] = from_float<T>(sum);
  }
}

template <typename T, int Bits, Wna16Codes Codes, int PairRows, IntPath Path, bool Swapped = false>
__global__ void __launch_bounds__(kMaxThreads) wna16_decode_down_kernel(const DownParams p) {
  static_assert(Codes == Wna16Codes::kInteger);
  decode_down<T, Bits, Codes, PairRows, Path, Swapped>(p);
}

template <typename T, int Bits, Wna16Codes Codes, int PairRows, IntPath Path, bool Swapped = false>
__global__ void __maxnreg__(kFp4DownMaxRegisters) wna16_decode_fp4_down_kernel(const DownParams p) {
  static_assert(Codes != Wna16Codes::kInteger);
  decode_down<T, Bits, Codes, PairRows, Path, Swapped>(p);
}

// The down kernel of a code kind and variant.
template <typename T, int Bits, Wna16Codes Codes, int PairRows, IntPath Path, bool Swapped = false>
constexpr auto down_entry() -> void (*)(DownParams) {
  if constexpr (Codes == Wna16Codes::kInteger) {
    return wna16_decode_down_kernel<T, Bits, Codes, PairRows, Path, Swapped>;
  } else {
    return wna16_decode_fp4_down_kernel<T, Bits, Codes, PairRows, Path, Swapped>;
  }
}

// ---- Host side --------------------------------------------------------------------------------

template <typename Params>
void launch_kernel(void (*kernel)(Params), dim3 grid, int warps, size_t smem, bool pdl,
                   cudaStream_t stream, const Params& params) {
  opt_in_dynamic_shared(kernel, smem);
  launch_pdl_if(pdl, kernel, grid, dim3(static_cast<unsigned>(32 * warps)), smem, stream, params);
}

// "" when `w` holds a [E, parts x rows, cols] matrix the kernels can read, else the reason.
inline std::string weights_check(const Wna16Weights& w, int64_t parts, int64_t rows, int64_t cols) {
  if (w.words == nullptr) return "no packed words";
  if (w.parts != parts) {
    return fmt::format("packed in {} row part(s), {} expected", w.parts, parts);
  }
  if (w.part_rows < rows || w.part_rows % 8 != 0 ||
      w.k_steps != (cols + kWna16KStep - 1) / kWna16KStep || w.groups < 1 || w.group_size <= 0) {
    return fmt::format("packed part rows {} K steps {} do not fit {} rows over K {}", w.part_rows,
                       w.k_steps, rows, cols);
  }
  switch (w.codes) {
    case Wna16Codes::kInteger:
      if (w.bits != 4 && w.bits != 8) return fmt::format("{} bits (4 or 8 expected)", w.bits);
      if (w.params == nullptr) return "integer codes need their F32 pairs";
      // warp_block_gemm_exact addresses an expert's pairs with 32-bit float offsets.
      if (w.parts * w.part_rows * w.groups * 2 > INT32_MAX) {
        return fmt::format("{} x {} rows of {} scale groups: more pairs an expert than {} floats",
                           w.parts, w.part_rows, w.groups, INT32_MAX);
      }
      return "";
    case Wna16Codes::kMxfp4:
      if (w.bits != 4 || w.scale_bytes == nullptr) return "MXFP4 needs 4 bits and scale bytes";
      return "";
    case Wna16Codes::kNvfp4:
      if (w.bits != 4 || w.scale_bytes == nullptr || w.globals == nullptr) {
        return "NVFP4 needs 4 bits, scale bytes and globals";
      }
      return "";
  }
  return "unknown codes";
}

// Slices of a K of k_steps 128-wide steps: `forced`, or (0) as many as leave no slice more than
// `in_flight` steps (the steps a warp keeps in flight, so a slice is one round of loads), at most
// 8; never more than the steps, and then as few as give the same slice length (no empty slice).
inline int resolve_k_slices(int forced, int64_t k_steps, int in_flight) {
  const int steps = static_cast<int>(std::max<int64_t>(1, k_steps));
  int slices = forced > 0 ? forced : std::min(8, (steps + in_flight - 1) / in_flight);
  slices = std::clamp(slices, 1, steps);
  const int per = (steps + slices - 1) / slices;
  return (steps + per - 1) / per;
}

// The integer path of `w` (IntPath): exact when every zero point is an integer code (found by
// the packer), with step-aligned groups when they are channel-wise or a multiple of 128 columns.
inline IntPath int_path(const Wna16Weights& w) {
  if (w.zeros != Wna16Zeros::kIntegerCodes) return IntPath::kPerValue;
  return w.groups == 1 || w.group_size % kWna16KStep == 0 ? IntPath::kExactSteps : IntPath::kExact;
}

// Whether a kernel over `w` in T for `tokens` tokens takes the swapped operands (block16_gemm):
// Integer codes on an exact path and FP4 codes whose scales T holds (kSwappable), in groups of 8
// pairs (up to 8 tokens: the mma's n8), from 2 tokens unless the tiles say otherwise
// (Wna16DecodeTiles::swap_operands has the timing behind the rule).
template <typename T>
bool swapped_operands(const Wna16Weights& w, int64_t tokens, const Wna16DecodeTiles& tiles) {
  if (tiles.swap_operands == 0 || tokens > 8 || (tiles.swap_operands < 0 && tokens < 2)) {
    return false;
  }
  switch (w.codes) {
    case Wna16Codes::kInteger:
      return int_path(w) != IntPath::kPerValue;
    case Wna16Codes::kMxfp4:
      return wna16::kFp4ScaleInT<T, Wna16Codes::kMxfp4>;
    case Wna16Codes::kNvfp4:
      return wna16::kFp4ScaleInT<T, Wna16Codes::kNvfp4>;
  }
  return false;
}

// The up / down kernel of a launch (FP4 codes have only the kExact variants; swapped operands
// PairRows 8 only, of the kinds swapped_operands takes).
template <typename T, int Bits, Wna16Codes Codes, bool Gated>
auto up_kernel(bool rows16, [[maybe_unused]] IntPath path, [[maybe_unused]] bool swapped)
    -> void (*)(UpParams) {
  if constexpr (Codes == Wna16Codes::kInteger) {
    if (swapped) {
      return path == IntPath::kExactSteps
                 ? wna16_decode_up_kernel<T, Bits, Codes, Gated, 8, IntPath::kExactSteps, true>
                 : wna16_decode_up_kernel<T, Bits, Codes, Gated, 8, IntPath::kExact, true>;
    }
  } else if constexpr (kSwappable<T, Bits, Codes, IntPath::kExact>) {
    if (swapped) return wna16_decode_up_kernel<T, Bits, Codes, Gated, 8, IntPath::kExact, true>;
  }
  if constexpr (Codes == Wna16Codes::kInteger) {
    if (path == IntPath::kPerValue) {
      return rows16 ? wna16_decode_up_kernel<T, Bits, Codes, Gated, 16, IntPath::kPerValue>
                    : wna16_decode_up_kernel<T, Bits, Codes, Gated, 8, IntPath::kPerValue>;
    }
    if (path == IntPath::kExactSteps) {
      return rows16 ? wna16_decode_up_kernel<T, Bits, Codes, Gated, 16, IntPath::kExactSteps>
                    : wna16_decode_up_kernel<T, Bits, Codes, Gated, 8, IntPath::kExactSteps>;
    }
  }
  return rows16 ? wna16_decode_up_kernel<T, Bits, Codes, Gated, 16, IntPath::kExact>
                : wna16_decode_up_kernel<T, Bits, Codes, Gated, 8, IntPath::kExact>;
}
template <typename T, int Bits, Wna16Codes Codes>
auto down_kernel(bool rows16, [[maybe_unused]] IntPath path, [[maybe_unused]] bool swapped)
    -> void (*)(DownParams) {
  if constexpr (Codes == Wna16Codes::kInteger) {
    if (swapped) {
      return path == IntPath::kExactSteps
                 ? down_entry<T, Bits, Codes, 8, IntPath::kExactSteps, true>()
                 : down_entry<T, Bits, Codes, 8, IntPath::kExact, true>();
    }
  } else if constexpr (kSwappable<T, Bits, Codes, IntPath::kExact>) {
    if (swapped) return down_entry<T, Bits, Codes, 8, IntPath::kExact, true>();
  }
  if constexpr (Codes == Wna16Codes::kInteger) {
    if (path == IntPath::kPerValue) {
      return rows16 ? down_entry<T, Bits, Codes, 16, IntPath::kPerValue>()
                    : down_entry<T, Bits, Codes, 8, IntPath::kPerValue>();
    }
    if (path == IntPath::kExactSteps) {
      return rows16 ? down_entry<T, Bits, Codes, 16, IntPath::kExactSteps>()
                    : down_entry<T, Bits, Codes, 8, IntPath::kExactSteps>();
    }
  }
  return rows16 ? down_entry<T, Bits, Codes, 16, IntPath::kExact>()
                : down_entry<T, Bits, Codes, 8, IntPath::kExact>();
}

// Whether the kernels launch with programmatic stream serialization (Wna16DecodeTiles::pdl) for
// `tokens` tokens.
template <Wna16Codes Codes>
bool use_pdl(const Wna16DecodeTiles& tiles, int64_t tokens) {
  return tiles.pdl < 0 ? Codes == Wna16Codes::kInteger || tokens == 1 : tiles.pdl != 0;
}

// The most bytes of staged x (UpParams::staged_x, 512 a 128-wide step): hidden sizes up to 8192
// (GPT-OSS 2880: 11.5 KB; DeepSeek-V3 7168: 28 KB). With the partial sums (at most 16 warps x 2
// parts x 512 bytes) and the pair tables (static, ~11 KB) a CTA takes at most ~59 KB.
inline constexpr int64_t kUpStagedXMaxBytes = 32 * 1024;

template <typename T, int Bits, Wna16Codes Codes>
void launch_up(UpParams p, const Wna16DecodeTiles& tiles, bool gated, cudaStream_t stream) {
  const int parts = gated ? 2 : 1;
  const bool rows16 = p.num_pairs > 8 * p.top_k;  // more than 8 tokens: kMaxPairRows
  const bool swapped = swapped_operands<T>(p.w13, p.num_pairs / p.top_k, tiles);
  // Swapped: two blocks' words in a round, half the steps.
  const int in_flight =
      (gated ? kStepsInFlight<Bits, 2> : kStepsInFlight<Bits, 1>) / (swapped ? 2 : 1);
  p.k_slices = resolve_k_slices(tiles.up_k_slices, p.w13.k_steps, in_flight);
  p.blocks_per_cta = tiles.up_blocks_per_cta > 0     ? tiles.up_blocks_per_cta
                     : Codes == Wna16Codes::kInteger ? 1
                                                     : std::max(1, 8 / p.k_slices);
  const int warps = p.k_slices * p.blocks_per_cta;
  MG_CHECK(warps <= kMaxWarps,
           "WNA16 decode: {} K slices x {} blocks per up CTA are {} warps, at most {}", p.k_slices,
           p.blocks_per_cta, warps, kMaxWarps);
  const int blocks = swapped ? (p.inter + 15) / 16 : (p.inter + 7) / 8;
  const int expert_slots = tiles.up_expert_slots > 0       ? tiles.up_expert_slots
                           : Codes == Wna16Codes::kInteger ? 64
                                                           : 16;
  const dim3 grid(static_cast<unsigned>((blocks + p.blocks_per_cta - 1) / p.blocks_per_cta),
                  static_cast<unsigned>(std::max(1, std::min(p.num_pairs, expert_slots))));
  // x staged in shared memory (stage_x_units) for one token of FP4 codes on the unswapped kernel,
  // up to kUpStagedXMaxBytes; then the slices' accumulators (up_kernel's partial), only when a
  // block is split. launch_kernel opts in to more than the default 48 KB where needed.
  const IntPath path = int_path(p.w13);
  const int64_t staged_entries = p.w13.k_steps * kStagedEntriesPerStep;
  p.staged_x = tiles.up_stage_x && Codes != Wna16Codes::kInteger && !swapped && !rows16 &&
                       p.num_pairs == p.top_k && staged_entries * 16 <= kUpStagedXMaxBytes
                   ? static_cast<int>(staged_entries)
                   : 0;
  const size_t smem =
      static_cast<size_t>(p.staged_x) * 16 +
      (p.k_slices > 1 ? static_cast<size_t>(warps) * parts * 4 * 32 * sizeof(float) : 0);
  launch_kernel(gated ? up_kernel<T, Bits, Codes, true>(rows16, path, swapped)
                      : up_kernel<T, Bits, Codes, false>(rows16, path, swapped),
                grid, warps, smem, use_pdl<Codes>(tiles, p.num_pairs / p.top_k), stream, p);
}

template <typename T, int Bits, Wna16Codes Codes>
void launch_down(DownParams p, const Wna16DecodeTiles& tiles, cudaStream_t stream) {
  const bool rows16 = p.num_tokens > 8;  // as launch_up's
  const bool swapped = swapped_operands<T>(p.w2, p.num_tokens, tiles);
  // Swapped: two blocks an item and an even count a CTA (launch's default halves the CTAs of one
  // block each), so twice the warps a CTA keep the warps an SM. H200 timing test (session 22,
  // swapped, µs 8 / 16 warps): qwen3 int4 M = 1 22.7 / 20.4, 2 34.5 / 28.6, 4 60.3 / 50.1, 8
  // 102.8 / 88.0; gpt-oss-120b MXFP4 M = 1 47.4 / 48.3, 2 73.3 / 74.3, 8 231.9 / 225.9.
  // FP4 keeps 8: its down kernels hold kFp4DownMaxRegisters, at which a 16-warp CTA is one an SM
  // (H200 timing test, session 25, gpt-oss-120b MXFP4 swapped µs 16 / 8 warps at 80 registers:
  // M = 2 77.4 / 71.8, 4 137.6 / 130.2, 8 241.7 / 227.5).
  const int warps = tiles.down_warps > 0                       ? tiles.down_warps
                    : swapped && Codes == Wna16Codes::kInteger ? 16
                                                               : 8;
  // Swapped: two blocks' words in a round, half the steps.
  const int in_flight = kStepsInFlight<Bits, 1> / (swapped ? 2 : 1);
  // Integer codes take 1 slice by the rule (Wna16DecodeTiles::down_k_slices).
  const int forced_slices =
      Codes == Wna16Codes::kInteger && tiles.down_k_slices == 0 ? 1 : tiles.down_k_slices;
  p.k_slices = resolve_k_slices(forced_slices, p.w2.k_steps, in_flight);
  if (Codes != Wna16Codes::kInteger && tiles.down_k_slices == 0) {
    const int fill = (warps + p.num_pairs - 1) / p.num_pairs;  // one item a warp, pairs distinct
    p.k_slices = resolve_k_slices(std::min(p.k_slices, fill), p.w2.k_steps, in_flight);
  }
  // The partial sums of all slices stay in shared memory: fewer slices when they would not fit.
  const size_t slice_bytes =
      static_cast<size_t>(p.num_pairs) * p.blocks_per_cta * 8 * sizeof(float);
  while (p.k_slices > 1 && p.k_slices * slice_bytes > 32 * 1024) {
    p.k_slices = resolve_k_slices(p.k_slices - 1, p.w2.k_steps, in_flight);
  }
  const size_t smem = p.k_slices * slice_bytes;
  MG_CHECK(smem <= 32 * 1024,
           "WNA16 decode: {} pairs x {} rows per down CTA need {} bytes of shared memory, more "
           "than 32 KB",
           p.num_pairs, p.blocks_per_cta * 8, smem);
  const int64_t row_blocks = (p.hidden + 7) / 8;
  const dim3 grid(static_cast<unsigned>((row_blocks + p.blocks_per_cta - 1) / p.blocks_per_cta));
  launch_kernel(down_kernel<T, Bits, Codes>(rows16, int_path(p.w2), swapped), grid, warps, smem,
                use_pdl<Codes>(tiles, p.num_tokens), stream, p);
}

// The kernels of the packed matrix's code kind and width.
template <typename T>
void launch_up_codes(const UpParams& p, const Wna16DecodeTiles& tiles, bool gated,
                     cudaStream_t stream) {
  switch (p.w13.codes) {
    case Wna16Codes::kInteger:
      if (p.w13.bits == 4) return launch_up<T, 4, Wna16Codes::kInteger>(p, tiles, gated, stream);
      return launch_up<T, 8, Wna16Codes::kInteger>(p, tiles, gated, stream);
    case Wna16Codes::kMxfp4:
      return launch_up<T, 4, Wna16Codes::kMxfp4>(p, tiles, gated, stream);
    case Wna16Codes::kNvfp4:
      return launch_up<T, 4, Wna16Codes::kNvfp4>(p, tiles, gated, stream);
  }
  MG_FAIL("WNA16 decode: unknown codes {}", static_cast<int>(p.w13.codes));
}

template <typename T>
void launch_down_codes(const DownParams& p, const Wna16DecodeTiles& tiles, cudaStream_t stream) {
  switch (p.w2.codes) {
    case Wna16Codes::kInteger:
      if (p.w2.bits == 4) return launch_down<T, 4, Wna16Codes::kInteger>(p, tiles, stream);
      return launch_down<T, 8, Wna16Codes::kInteger>(p, tiles, stream);
    case Wna16Codes::kMxfp4:
      return launch_down<T, 4, Wna16Codes::kMxfp4>(p, tiles, stream);
    case Wna16Codes::kNvfp4:
      return launch_down<T, 4, Wna16Codes::kNvfp4>(p, tiles, stream);
  }
  MG_FAIL("WNA16 decode: unknown codes {}", static_cast<int>(p.w2.codes));
}

template <typename T>
void launch(const Wna16DecodeArgs& a, const Wna16DecodeTiles& tiles, cudaStream_t stream) {
  if (a.num_tokens <= 0) return;
  const std::string shape = wna16_expert_mlp_check(a.hidden, a.inter);
  MG_CHECK(shape.empty(), "WNA16 decode: {}", shape);
  MG_CHECK(a.num_tokens <= kWna16DecodeMaxTokens,
           "WNA16 decode: {} tokens, at most {} (larger batches take the grouped GEMMs)",
           a.num_tokens, kWna16DecodeMaxTokens);
  MG_CHECK(a.top_k >= 1 && a.num_tokens * a.top_k <= decode::kMaxPairs,
           "WNA16 decode: top_k {} x {} tokens must be 1 .. {} pairs", a.top_k, a.num_tokens,
           decode::kMaxPairs);
  MG_CHECK(
      tiles.up_k_slices >= 0 && tiles.up_k_slices <= kMaxWarps && tiles.up_blocks_per_cta >= 0 &&
          tiles.up_blocks_per_cta <= kMaxWarps && tiles.down_k_slices >= 0 &&
          tiles.down_warps >= 0 && tiles.down_warps <= kMaxWarps && tiles.down_blocks_per_cta >= 0,
      "WNA16 decode: tiles up K slices {}, up blocks per CTA {}, down warps {} must be 0 .. {} "
      "and down K slices {}, down blocks per CTA {} >= 0 (0: the default)",
      tiles.up_k_slices, tiles.up_blocks_per_cta, tiles.down_warps, kMaxWarps, tiles.down_k_slices,
      tiles.down_blocks_per_cta);
  MG_CHECK(tiles.up_expert_slots >= 0,
           "WNA16 decode: tiles up expert slots {} must be >= 0 (0: the default)",
           tiles.up_expert_slots);
  MG_CHECK(tiles.swap_operands >= -1 && tiles.swap_operands <= 1,
           "WNA16 decode: tiles swap_operands {} must be -1 (the rule), 0 or 1",
           tiles.swap_operands);
  const bool gated = is_gated(a.act.kind);
  std::string why = weights_check(a.w13, gated ? 2 : 1, a.inter, a.hidden);
  MG_CHECK(why.empty(), "WNA16 decode: w13: {}", why);
  why = weights_check(a.w2, 1, a.hidden, a.inter);
  MG_CHECK(why.empty(), "WNA16 decode: w2: {}", why);
  MG_CHECK(a.x != nullptr && a.topk_ids != nullptr && a.topk_weights != nullptr &&
               a.expert_map != nullptr && a.act_scratch != nullptr && a.out != nullptr,
           "WNA16 decode: x, topk_ids, topk_weights, expert_map, act_scratch and out must be set");
  const int pairs = static_cast<int>(a.num_tokens * a.top_k);

  UpParams up;
  up.x = a.x;
  up.topk_ids = a.topk_ids;
  up.experts = {a.expert_map, a.identity_experts};
  up.w13 = a.w13;
  up.b13 = a.b13;
  up.act = a.act_scratch;
  up.num_pairs = pairs;
  up.top_k = static_cast<int>(a.top_k);
  up.hidden = static_cast<int>(a.hidden);
  up.inter = static_cast<int>(a.inter);
  up.evict_first = tiles.evict_first;
  up.act_params = a.act;
  launch_up_codes<T>(up, tiles, gated, stream);

  DownParams down;
  down.topk_ids = a.topk_ids;
  down.topk_weights = a.topk_weights;
  down.experts = {a.expert_map, a.identity_experts};
  down.w2 = a.w2;
  down.b2 = a.b2;
  down.act = a.act_scratch;
  down.out = a.out;
  down.num_pairs = pairs;
  down.num_tokens = static_cast<int>(a.num_tokens);
  down.top_k = static_cast<int>(a.top_k);
  down.hidden = static_cast<int>(a.hidden);
  down.inter = static_cast<int>(a.inter);
  down.evict_first = tiles.evict_first;
  down.prefetch_l2 = tiles.down_prefetch_l2;
  if (tiles.down_blocks_per_cta > 0) {
    down.blocks_per_cta = tiles.down_blocks_per_cta;
  } else {
    // As few blocks as keep four CTAs on every SM (a CTA owns whole rows of all experts, so
    // every CTA carries the same work). qwen3 (H 2048) and gpt-oss (H 2880) get one block per CTA
    // on an H100.
    // Swapped operands take blocks two at a time: an even count.
    const int64_t row_blocks = (a.hidden + 7) / 8;
    const int64_t ctas = 4 * static_cast<int64_t>(decode::multiprocessor_count());
    down.blocks_per_cta = static_cast<int>(std::max<int64_t>(1, (row_blocks + ctas - 1) / ctas));
    if (swapped_operands<T>(a.w2, a.num_tokens, tiles)) {
      down.blocks_per_cta += down.blocks_per_cta & 1;
    }
  }
  launch_down_codes<T>(down, tiles, stream);
}

}  // namespace mg::cuda::wna16_decode

namespace mg::cuda {

template <typename T>
void launch_wna16_decode_experts(const Wna16DecodeArgs& args, const Wna16DecodeTiles& tiles,
                                 cudaStream_t stream) {
  wna16_decode::launch<T>(args, tiles, stream);
}

}  // namespace mg::cuda
