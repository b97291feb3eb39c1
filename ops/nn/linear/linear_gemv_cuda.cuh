// The GEMV kernel of linear_gemv_cuda.h (included by the per-dtype linear_cuda_<dtype>.cu files).
#pragma once

#include "framework/core/error.h"
#include "framework/device/cuda/cuda_check.h"
#include "framework/device/cuda/cuda_utils.cuh"
#include "framework/device/cuda/pdl.cuh"
#include "ops/nn/linear/linear_gemv_cuda.h"

namespace mg::cuda {

constexpr int kGemvThreads = 256;
constexpr int kGemvWarps = kGemvThreads / 32;

// The work of CUDA block `block` of a GEMV launch (gemv_kernel, or one weight block of
// gemv_split_kernel): output features [block · features_per_block, + features_per_block).
// kMaxRows: the template's accumulator count (1, 2, 4 or 8); `rows` <= kMaxRows are computed.
// kVector: 16-byte loads of w and x (rows are 16-byte multiples and both pointers aligned).
// kLoads: 16-byte weight loads each lane issues before the first is used
// (GemvArgs::loads_in_flight). Every thread of the block must call it (it synchronises the block).
//
// It starts the kernel under programmatic dependent launch (pdl.cuh): the weights never change
// while graphs run, so before pdl_wait each lane issues its first round of kLoads weight loads
// into registers (for a 2048-column BF16 row and 8 loads: the whole row). Those bytes stream
// while the kernel before still runs (attention, a norm: latency-bound, few bytes); after the wait
// only x (just written, in L2) is read before the first FMA. The chunks are summed in the same
// order as without the early round.
//
// The block does not also ask L2 for the rest of its rows before the wait (a bulk prefetch,
// pdl_prefetch_l2): that stream ran beside the kernel before (attention's split merge, a norm),
// whose chains of L2 round trips it slowed by more than the GEMV gained. `bench e2e ...
// --cuda-graph` on an H200 (2026-12-04, docs/performance.md), decode tokens/s with / without it:
// the 48-layer Qwen3-30B-A3B-shaped model 345.6, 348.7 / 355.8, 353.0; the 24-layer
// GPT-OSS-20B-shaped MXFP4 model 478.9, 478.4 / 491.5, 487.1.
template <typename T, typename TOut, int kMaxRows, bool kVector, int kLoads>
__device__ __forceinline__ void gemv_block(const T* __restrict__ x, const T* __restrict__ w,
                                           const TOut* __restrict__ bias, TOut* __restrict__ y,
                                           int rows, int64_t in, int64_t out, float alpha,
                                           int warps_per_feature, int64_t block) {
  __shared__ float partial[kGemvWarps][kMaxRows];
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
  const int features_per_block = kGemvWarps / warps_per_feature;
  const int64_t n = block * features_per_block + warp / warps_per_feature;
  const int part = warp % warps_per_feature;
  const int64_t stride = static_cast<int64_t>(warps_per_feature) * 32;
  float acc[kMaxRows];
#pragma unroll
  for (int m = 0; m < kMaxRows; ++m) acc[m] = 0.0f;

  constexpr int kElems = 16 / sizeof(T);
  const int64_t chunks = in / kElems;  // kVector: 16-byte chunks of a row
  const uint4* w4 = reinterpret_cast<const uint4*>(w + n * in);
  const int64_t first_chunk = part * 32 + lane;
  uint4 wv[kLoads];
  // One round: chunks c, c + stride, ... (kLoads of them); past the row's end (or for a block's
  // missing feature) nothing is loaded.
  const auto load_round = [&](int64_t c) {
#pragma unroll
    for (int u = 0; u < kLoads; ++u) {
      wv[u] =
          n < out && c + u * stride < chunks ? __ldcs(w4 + c + u * stride) : make_uint4(0, 0, 0, 0);
    }
  };
  if constexpr (kVector) load_round(first_chunk);
  // x is the previous kernel's output and y may be its input.
  pdl_wait();
  pdl_launch_dependents();

  if (n < out) {
    if constexpr (kVector) {
      const uint4* x4 = reinterpret_cast<const uint4*>(x);
      auto fma_chunk = [&](const uint4& wv, int64_t c) {
        const T* we = reinterpret_cast<const T*>(&wv);
        float wf[kElems];
#pragma unroll
        for (int e = 0; e < kElems; ++e) wf[e] = to_float(we[e]);
#pragma unroll
        for (int m = 0; m < kMaxRows; ++m) {
          if (m < rows) {
            const uint4 xv = __ldg(x4 + m * chunks + c);
            const T* xe = reinterpret_cast<const T*>(&xv);
#pragma unroll
            for (int e = 0; e < kElems; ++e) acc[m] = fmaf(wf[e], to_float(xe[e]), acc[m]);
          }
        }
      };
      // kLoads independent 16-byte weight loads in flight per lane before any math: the loop is
      // bound by memory latency, not by the FMAs. A short row, or a feature split over several
      // warps, is one round.
      for (int64_t c = first_chunk; c < chunks; c += kLoads * stride) {
        if (c != first_chunk) load_round(c);
#pragma unroll
        for (int u = 0; u < kLoads; ++u) {
          if (c + u * stride < chunks) fma_chunk(wv[u], c + u * stride);
        }
      }
    } else {
      const T* wrow = w + n * in;
      for (int64_t k = part * 32 + lane; k < in; k += stride) {
        const float wk = to_float(wrow[k]);
#pragma unroll
        for (int m = 0; m < kMaxRows; ++m) {
          if (m < rows) acc[m] = fmaf(wk, to_float(x[m * in + k]), acc[m]);
        }
      }
    }
  }
#pragma unroll
  for (int m = 0; m < kMaxRows; ++m) acc[m] = warp_sum(acc[m]);
  if (warps_per_feature > 1) {
    if (lane == 0) {
#pragma unroll
      for (int m = 0; m < kMaxRows; ++m) partial[warp][m] = acc[m];
    }
    __syncthreads();  // reached by every thread: no early return above
    if (part != 0) return;
#pragma unroll
    for (int m = 0; m < kMaxRows; ++m) {
      float s = 0.0f;
      for (int p = 0; p < warps_per_feature; ++p) s += partial[warp + p][m];
      acc[m] = s;
    }
  }
  if (lane != 0 || n >= out) return;
  const float b = bias != nullptr ? to_float(bias[n]) : 0.0f;
#pragma unroll
  for (int m = 0; m < kMaxRows; ++m) {
    if (m < rows) y[m * out + n] = from_float<TOut>(alpha * acc[m] + b);
  }
}

template <typename T, typename TOut, int kMaxRows, bool kVector, int kLoads>
__global__ void __launch_bounds__(kGemvThreads)
    gemv_kernel(const T* __restrict__ x, const T* __restrict__ w, const TOut* __restrict__ bias,
                TOut* __restrict__ y, int rows, int64_t in, int64_t out, float alpha,
                int warps_per_feature) {
  gemv_block<T, TOut, kMaxRows, kVector, kLoads>(x, w, bias, y, rows, in, out, alpha,
                                                 warps_per_feature, blockIdx.x);
}

// GemvSplitArgs as the kernel reads it: per weight block its output, bias, rows, first weight
// row, warps per feature and first CUDA block (first_cuda_block[num_blocks]: the grid size).
template <typename T>
struct GemvSplitBlocks {
  T* y[kGemvMaxBlocks];
  const T* bias[kGemvMaxBlocks];
  int64_t out[kGemvMaxBlocks];
  int64_t first_row[kGemvMaxBlocks];
  int warps_per_feature[kGemvMaxBlocks];
  int64_t first_cuda_block[kGemvMaxBlocks + 1];
  int num_blocks;
};

template <typename T, int kMaxRows, bool kVector, int kLoads>
__global__ void __launch_bounds__(kGemvThreads)
    gemv_split_kernel(const T* __restrict__ x, const T* __restrict__ w, int rows, int64_t in,
                      float alpha, const GemvSplitBlocks<T> blocks) {
  const int64_t cuda_block = blockIdx.x;
  int b = 0;  // uniform over the CUDA block: every thread takes the same weight block
  while (b + 1 < blocks.num_blocks && cuda_block >= blocks.first_cuda_block[b + 1]) ++b;
  gemv_block<T, T, kMaxRows, kVector, kLoads>(
      x, w + blocks.first_row[b] * in, blocks.bias[b], blocks.y[b], rows, in, blocks.out[b], alpha,
      blocks.warps_per_feature[b], cuda_block - blocks.first_cuda_block[b]);
}

// The loads in flight a launch of up to kMaxRows rows takes: `requested` (0: kGemvLoadsInFlight),
// 8 only up to 2 rows (more rows hold more x and accumulator registers; 4 rows and up keep 4).
inline int gemv_loads(int requested, int max_rows) {
  const int loads = requested > 0 ? requested : static_cast<int>(kGemvLoadsInFlight);
  MG_ASSERT(loads == 4 || loads == 8, "gemv: {} loads in flight (4 or 8)", loads);
  return max_rows <= 2 ? loads : 4;
}

template <typename T, typename TOut, int kMaxRows>
void launch_gemv_rows(const GemvArgs& a, cudaStream_t stream) {
  const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  const bool vector =
      (a.in * static_cast<int64_t>(sizeof(T))) % 16 == 0 && aligned(a.x) && aligned(a.w);
  const int wpf = gemv_warps_per_feature(a.in, a.out, static_cast<int>(sizeof(T)), a.target_warps);
  const int64_t features_per_block = kGemvWarps / wpf;
  const int64_t blocks = (a.out + features_per_block - 1) / features_per_block;
  MG_ASSERT(blocks <= 0x7fffffff, "gemv: {} output features", a.out);
  const T* x = static_cast<const T*>(a.x);
  const T* w = static_cast<const T*>(a.w);
  const TOut* bias = static_cast<const TOut*>(a.bias);
  TOut* y = static_cast<TOut*>(a.y);
  const int rows = static_cast<int>(a.rows);
  const int loads = a.loads_in_flight > 0 ? a.loads_in_flight : blocks >= kGemvManyBlocks ? 8 : 0;
  const auto kernel = !vector                            ? gemv_kernel<T, TOut, kMaxRows, false, 4>
                      : gemv_loads(loads, kMaxRows) == 8 ? gemv_kernel<T, TOut, kMaxRows, true, 8>
                                                         : gemv_kernel<T, TOut, kMaxRows, true, 4>;
  launch_pdl(kernel, dim3(static_cast<unsigned>(blocks)), dim3(kGemvThreads), 0, stream, x, w, bias,
             y, rows, a.in, a.out, a.alpha, wpf);
}

template <typename T, int kMaxRows>
void launch_gemv_split_rows(const GemvSplitArgs& a, cudaStream_t stream) {
  const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  // With 16-byte rows every block's first row is as aligned as w itself: one choice for all, the
  // one launch_gemv makes for each block alone.
  const bool vector =
      (a.in * static_cast<int64_t>(sizeof(T))) % 16 == 0 && aligned(a.x) && aligned(a.w);
  GemvSplitBlocks<T> blocks{};
  blocks.num_blocks = a.num_blocks;
  int64_t row = 0, cuda_blocks = 0;
  for (int b = 0; b < a.num_blocks; ++b) {
    const GemvSplitArgs::Block& block = a.blocks[b];
    MG_ASSERT(block.out > 0 && block.y != nullptr, "gemv split: block {} of {} rows", b, block.out);
    const int wpf =
        block.warps_per_feature > 0
            ? block.warps_per_feature
            : gemv_warps_per_feature(a.in, block.out, static_cast<int>(sizeof(T)), a.target_warps);
    MG_ASSERT(wpf == 1 || wpf == 2 || wpf == 4 || wpf == 8, "gemv split: {} warps per feature",
              wpf);
    const int64_t features_per_block = kGemvWarps / wpf;
    blocks.y[b] = static_cast<T*>(block.y);
    blocks.bias[b] = static_cast<const T*>(block.bias);
    blocks.out[b] = block.out;
    blocks.first_row[b] = row;
    blocks.warps_per_feature[b] = wpf;
    blocks.first_cuda_block[b] = cuda_blocks;
    row += block.out;
    cuda_blocks += (block.out + features_per_block - 1) / features_per_block;
  }
  blocks.first_cuda_block[a.num_blocks] = cuda_blocks;
  MG_ASSERT(cuda_blocks <= 0x7fffffff, "gemv split: {} output features", row);
  const T* x = static_cast<const T*>(a.x);
  const T* w = static_cast<const T*>(a.w);
  const int rows = static_cast<int>(a.rows);
  const auto kernel = !vector ? gemv_split_kernel<T, kMaxRows, false, 4>
                      : gemv_loads(a.loads_in_flight, kMaxRows) == 8
                          ? gemv_split_kernel<T, kMaxRows, true, 8>
                          : gemv_split_kernel<T, kMaxRows, true, 4>;
  launch_pdl(kernel, dim3(static_cast<unsigned>(cuda_blocks)), dim3(kGemvThreads), 0, stream, x, w,
             rows, a.in, a.alpha, blocks);
}

template <typename T>
void launch_gemv_split(const GemvSplitArgs& a, cudaStream_t stream) {
  MG_ASSERT(a.rows >= 1 && a.rows <= kGemvMaxRows && a.in > 0 && a.num_blocks >= 1 &&
                a.num_blocks <= kGemvMaxBlocks,
            "gemv split: {} rows x {} in, {} blocks", a.rows, a.in, a.num_blocks);
  if (a.rows == 1) return launch_gemv_split_rows<T, 1>(a, stream);
  if (a.rows == 2) return launch_gemv_split_rows<T, 2>(a, stream);
  if (a.rows <= 4) return launch_gemv_split_rows<T, 4>(a, stream);
  return launch_gemv_split_rows<T, 8>(a, stream);
}

template <typename T, typename TOut>
void launch_gemv(const GemvArgs& a, cudaStream_t stream) {
  MG_ASSERT(a.rows >= 1 && a.rows <= kGemvMaxRows && a.in > 0 && a.out > 0,
            "gemv: {} rows x {} in x {} out", a.rows, a.in, a.out);
  if (a.rows == 1) return launch_gemv_rows<T, TOut, 1>(a, stream);
  if (a.rows == 2) return launch_gemv_rows<T, TOut, 2>(a, stream);
  if (a.rows <= 4) return launch_gemv_rows<T, TOut, 4>(a, stream);
  return launch_gemv_rows<T, TOut, 8>(a, stream);
}

}  // namespace mg::cuda
