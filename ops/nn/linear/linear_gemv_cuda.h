// The memory-bound path of GemmXwt (linear_gemm_cuda.h) for a few rows of x:
//   y [rows, out] = alpha · x [rows, in] · w [out, in]ᵀ (+ bias [out]),  rows <= kGemvMaxRows.
//
// Why not cuBLASLt: at M rows a GEMM does 2·M flops per weight element it reads (2 bytes in BF16),
// so up to M = 8 it needs ≤ 8 flop/byte against the H100's ~300 (990 TFLOP/s / 3.35 TB/s): time is
// the weight's bytes over HBM bandwidth, and what matters is that every SM streams the weight with
// wide loads from the first cycle. cuBLASLt's heuristic picks tiles built for tensor-core
// throughput (64+ rows of x, most of it padding at M = 1) and often too few CTAs for a narrow
// weight; `moegraph bench gemv` times both on the one-token shapes of the decode step
// (docs/performance.md has its run and the threshold it justifies).
//
// How: one or more warps per output feature walk its weight row with 16-byte loads (8 BF16/F16 or
// 4 F32 elements; scalar loads when the row or a pointer is not 16-byte aligned: odd `in`),
// accumulating all rows of x at once in fp32 (x is small and stays in L1); when there are few
// output features (k/v projections), up to 8 warps split one row's `in` (split-K within a block,
// reduced through shared memory) so the whole GPU has loads in flight. Launched with
// programmatic dependent launch (framework/device/cuda/pdl.cuh): before it waits for the kernel
// that wrote x, each lane loads its first round of weight vectors into registers, so those
// bytes stream during that kernel (no bulk L2 prefetch of the rest: linear_gemv_cuda.cuh says why).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace mg::cuda {

// Rows of x the GEMV kernel takes (1..8; tests and `bench gemv` force every count).
constexpr int64_t kGemvMaxRows = 8;
// Rows up to which GemmXwt chooses it, on weights whose rows are 16-byte multiples. `moegraph
// bench gemv` on an H100 (2026-11-25, BF16, docs/performance.md): at 1 row the GEMV beats
// cuBLASLt on every aligned decode projection (o_proj 7.96 vs 9.94 us, k/v 2.88 vs 5.31, router
// 2.15 vs 4.79, lm_head 198.9 vs 216.8) and at 2 rows on all but o_proj (10.24 vs 10.04); from
// 4 rows cuBLASLt wins o_proj and lm_head (8 rows: 400 vs 220 us); on unaligned rows (scalar
// loads) cuBLAS wins at 1 row (in 2047 x out 1001: 9.30 vs 5.24 us).
constexpr int64_t kGemvChosenRows = 2;
// Narrow weights (at most kGemvNarrowOut output features: k/v projections, routers) keep the GEMV
// up to kGemvNarrowChosenRows rows: cuBLASLt launches few CTAs for them at any row count, while
// the GEMV splits each row over warps. `moegraph bench gemv --rows 1,2,3,4,5,6,8` on an H200
// (2026-12-03, BF16, docs/performance.md "The GEMV up to 4 rows for narrow weights and q/k/v"),
// µs GEMV / cuBLASLt at 4 and 5 rows: k/v 2048 -> 512 3.76 / 5.40, 5.20 / 5.39; GPT-OSS's k/v
// 2880 -> 512 4.66 / 6.31, 6.47 / 6.31; routers 2048 -> 128 3.40 / 4.84, 4.82 / 4.84 and 2880 ->
// 128 4.24 / 5.64, 5.94 / 5.69. (The same run has cuBLASLt ahead of the GEMV at 2 rows of wide
// weights, q_proj 6.65 / 7.62 and lm_head 149.3 / 162.3, where the H100's had the GEMV ahead:
// kGemvChosenRows stays 2.)
constexpr int64_t kGemvNarrowOut = 1024;
constexpr int64_t kGemvNarrowChosenRows = 4;
// A linear with several outputs (q/k/v as one weight) takes one split GEMV up to this many rows
// when every block takes the GEMV at one row: the split GEMV reads the whole weight in one launch
// where the unfused blocks would be a GEMM each. Same run, µs split GEMV / three cuBLASLt GEMMs
// at 4 and 5 rows: 2048 -> 4096 + 512 + 512 14.46 / 17.36, 18.54 / 17.38; GPT-OSS's 2880 -> 4096 +
// 512 + 512 19.29 / 22.42, 24.86 / 22.47. From 3 rows a wide block's own GemmXwt takes cuBLASLt,
// so there the fused linear's floats differ from the unfused graph's by rounding (at 1 and 2 rows
// they are the same bits: CudaFusedLinear.*).
constexpr int64_t kGemvSplitChosenRows = 4;

// The rows up to which GemmXwt takes the GEMV for a weight of `out` features with 16-byte rows.
constexpr int64_t gemv_chosen_rows(int64_t out) {
  return out <= kGemvNarrowOut ? kGemvNarrowChosenRows : kGemvChosenRows;
}

// 16-byte weight loads each lane issues before it uses the first (4 or 8; 8 is taken up to 2 rows
// of x): 4, but 8 for launches of at least kGemvManyBlocks blocks (an LM head: many waves, where
// deeper rounds pay and the early first round matters little). `moegraph bench gemv` on an H200
// (2026-12-02, BF16, 1 row, µs, 4 / 8 loads, docs/performance.md): lm_head 2048 -> 151936
// 148.7 / 139.6; within one wave 8 loses or ties: the q/k/v split GEMV 8.28 / 8.90.
constexpr int kGemvLoadsInFlight = 4;
constexpr int64_t kGemvManyBlocks = 4096;

struct GemvArgs {
  const void* x = nullptr;     // [rows, in], T
  const void* w = nullptr;     // [out, in], T
  const void* bias = nullptr;  // [out], TOut, or null
  void* y = nullptr;           // [rows, out], TOut
  int64_t rows = 0;            // 1..kGemvMaxRows
  int64_t in = 0;
  int64_t out = 0;
  float alpha = 1.0f;
  int loads_in_flight = 0;  // 0: the rule (kGemvLoadsInFlight); else 4 or 8 (bench gemv times both)
  int64_t target_warps = 0;  // 0: the rule (gemv_warps_per_feature); bench gemv sweeps it
};

// T: float, __half or __nv_bfloat16; TOut: T, or float for 16-bit T (the MoE router's F32
// logits). Instantiated in linear_cuda_<dtype>.cu.
template <typename T, typename TOut>
void launch_gemv(const GemvArgs& args, cudaStream_t stream);

// Most output blocks of one split GEMV (linear's kLinearMaxOutputs).
constexpr int kGemvMaxBlocks = 8;

// One GEMV whose weight is several row blocks, each with its own output and bias (a linear with
// output_features: a layer's q/k/v projections as one launch):
//   y_b [rows, out_b] = alpha · x [rows, in] · w[rows_before_b .. + out_b, :]ᵀ (+ bias_b [out_b])
// Every block gets the CUDA blocks, warps per feature and vector loads launch_gemv would give it
// alone (its own out), so each y_b holds the floats the unfused GEMV wrote.
struct GemvSplitArgs {
  const void* x = nullptr;  // [rows, in], T
  const void* w = nullptr;  // [Σ out_b, in], T: the blocks' weights, one after the other
  int64_t rows = 0;         // 1..kGemvMaxRows
  int64_t in = 0;
  float alpha = 1.0f;
  int num_blocks = 0;        // 1..kGemvMaxBlocks
  int loads_in_flight = 0;   // as GemvArgs::loads_in_flight
  int64_t target_warps = 0;  // as GemvArgs::target_warps
  struct Block {
    void* y = nullptr;           // [rows, out], T
    const void* bias = nullptr;  // [out], T, or null
    int64_t out = 0;
    int warps_per_feature = 0;  // 0: the rule (gemv_warps_per_feature); else 1, 2, 4 or 8 (bench)
  } blocks[kGemvMaxBlocks];
};

// T: float, __half or __nv_bfloat16 (out dtype T). Instantiated in linear_cuda_<dtype>.cu.
template <typename T>
void launch_gemv_split(const GemvSplitArgs& args, cudaStream_t stream);

// Warps on the GPU that the split of a feature's `in` over warps aims at (more warps per feature:
// fewer rounds of loads per warp, more shared-memory reductions): kGemvTargetWarps, or
// kGemvLongRowTargetWarps for rows of at least kGemvLongRow elements. `moegraph bench gemv`'s grid
// sweep on an H100 (2026-11-25, BF16, 1 row, µs at 4096 / 8192 / 16384 warps, docs/performance.md):
// o_proj 4096 -> 2048 9.66 / 8.80 / 7.84; q_proj 2048 -> 4096 alone 9.64 / 7.94 / 7.95 but the
// q/k/v split GEMV (in 2048) 10.61 / 11.38 / 11.50, and k/v, router and lm_head (in 2048) the same
// at all three. Long rows aim at 8192 since the first round of weight loads moved before pdl_wait
// (gemv_block): the same sweep on an H200 (2026-12-02, default 4 loads) gave o_proj 6.68 / 6.34 /
// 7.15, and the default o_proj 7.13 -> 6.33 us at 1 row, 9.72 -> 8.66 at 2 rows. One rule of
// (in, out) for the plain and the split GEMV, so that a fused linear's outputs keep the floats of
// its unfused linears (CudaFusedLinear.*).
constexpr int64_t kGemvTargetWarps = 4096;
constexpr int64_t kGemvLongRow = 4096;
constexpr int64_t kGemvLongRowTargetWarps = 8192;

// Warps that split one output feature's `in` for a GEMV of this shape (1, 2, 4 or 8): the
// smallest count that puts `target_warps` warps on the GPU (0: the rule above), keeping at least
// 64 16-byte chunks of the row a warp (two loads a lane; 32 for rows that are not 16-byte
// multiples).
int gemv_warps_per_feature(int64_t in, int64_t out, int element_bytes, int64_t target_warps = 0);

}  // namespace mg::cuda
