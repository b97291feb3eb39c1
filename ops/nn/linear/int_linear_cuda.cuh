// The kernels of int_linear_cuda.h (included by the per-dtype int_linear_cuda_<dtype>.cu files).
//
// GEMV: each warp owns a tile of kIntGemvTileRows output rows (the last tile re-reads the last row
// in place of rows past `out` and never writes them) and walks them together over its share of
// `in`: per 16-byte chunk of codes (32 4-bit or 16 8-bit codes) one load per row, then per piece
// of 8 codes one 16-byte load of x per token row, converted to fp32 once and used by all the
// tile's rows. When a tile alone would leave the GPU short of warps, up to 8 warps split `in`
// (reduced through shared memory). Every element is (u - z) in fp32 exactly; the 8 products of a
// piece are summed and scaled once by the group's s (a piece never straddles a group: groups are
// multiples of 8 columns on this path). Accumulation fp32; y = alpha · acc + bias, rounded once.
#pragma once

#include "framework/core/error.h"
#include "framework/device/cuda/cuda_check.h"
#include "framework/device/cuda/cuda_utils.cuh"
#include "ops/nn/linear/int_linear_cuda.h"

namespace mg::cuda {

constexpr int kIntGemvThreads = 256;
constexpr int kIntGemvWarps = kIntGemvThreads / 32;
// Output rows per warp: each piece of x converted to fp32 serves all of them.
constexpr int kIntGemvTileRows = 4;
// Warps a launch aims for before it splits `in` over more warps per tile (as the BF16 GEMV).
constexpr int64_t kIntGemvTargetWarps = 4096;

__device__ __forceinline__ int64_t int_group_of(const IntLinearWeights& w, int64_t k) {
  return w.group_shift >= 0 ? (k >> w.group_shift) : k / w.group_cols;
}

// u - z, exact: the float with bits 0x4B000000 | u is 2^23 + u; magic_zero is 2^23 + z.
__device__ __forceinline__ float int_code_minus_zero(uint32_t u, float magic_zero) {
  return __int_as_float(0x4B000000u | u) - magic_zero;
}

// Code u of column k of a row of codes (the odd-length scalar path and the dequantize kernel).
template <int kBits>
__device__ __forceinline__ uint32_t int_code_of(const uint8_t* row, int64_t k) {
  if constexpr (kBits == 4) {
    return (static_cast<uint32_t>(row[k >> 1]) >> ((k & 1) * 4)) & 0xFu;
  } else {
    return row[k];
  }
}

// kMaxRows: the accumulators per output row (1, 2, 4 or 8); `rows` <= kMaxRows are computed.
// kVector: the 16-byte path (int_gemv_vectorized, x 16-byte aligned); else one code at a time.
template <typename T, int kBits, int kMaxRows, bool kVector>
__global__ void __launch_bounds__(kIntGemvThreads)
    int_gemv_kernel(const IntLinearWeights w, const T* __restrict__ x, const T* __restrict__ bias,
                    T* __restrict__ y, int rows, float alpha, int warps_per_tile) {
  __shared__ float partial[kIntGemvWarps][kIntGemvTileRows][kMaxRows];
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
  const int tiles_per_block = kIntGemvWarps / warps_per_tile;
  const int64_t n0 = (static_cast<int64_t>(blockIdx.x) * tiles_per_block + warp / warps_per_tile) *
                     kIntGemvTileRows;
  const int part = warp % warps_per_tile;
  const int64_t stride = static_cast<int64_t>(warps_per_tile) * 32;
  // Rows past `out` (the last tile) read the last row again; their sums are never written.
  int64_t row[kIntGemvTileRows];
#pragma unroll
  for (int j = 0; j < kIntGemvTileRows; ++j) row[j] = n0 + j < w.out ? n0 + j : w.out - 1;
  float acc[kIntGemvTileRows][kMaxRows];
#pragma unroll
  for (int j = 0; j < kIntGemvTileRows; ++j) {
#pragma unroll
    for (int m = 0; m < kMaxRows; ++m) acc[j][m] = 0.0f;
  }

  if constexpr (kVector) {
    constexpr int kChunkCodes = 128 / kBits;    // codes per 16-byte chunk: 32 or 16
    constexpr int kPieces = kChunkCodes / 8;    // pieces of 8 codes per chunk: 4 or 2
    constexpr int kWordsPerPiece = kBits / 4;   // 32-bit words per piece: 1 or 2
    const int64_t chunks = w.in / kChunkCodes;  // per row: row_bytes == 16 · chunks
    const int64_t x_vectors = w.in / 8;         // 16-byte vectors per row of x
    const uint4* x4 = reinterpret_cast<const uint4*>(x);
    for (int64_t c = part * 32 + lane; c < chunks; c += stride) {
      // The tile's code loads first, all in flight before any math.
      uint4 wv[kIntGemvTileRows];
#pragma unroll
      for (int j = 0; j < kIntGemvTileRows; ++j) {
        wv[j] = __ldcs(reinterpret_cast<const uint4*>(w.codes + row[j] * w.row_bytes) + c);
      }
#pragma unroll
      for (int p = 0; p < kPieces; ++p) {
        const int64_t k = c * kChunkCodes + p * 8;
        const int64_t g = int_group_of(w, k);
        float xf[kMaxRows][8];
#pragma unroll
        for (int m = 0; m < kMaxRows; ++m) {
          if (m < rows) {
            const uint4 xv = __ldg(x4 + m * x_vectors + k / 8);
            const T* xe = reinterpret_cast<const T*>(&xv);
#pragma unroll
            for (int e = 0; e < 8; ++e) xf[m][e] = to_float(xe[e]);
          } else {
#pragma unroll
            for (int e = 0; e < 8; ++e) xf[m][e] = 0.0f;
          }
        }
#pragma unroll
        for (int j = 0; j < kIntGemvTileRows; ++j) {
          const float2 sz = __ldg(w.params + row[j] * w.groups + g);
          const uint32_t* words = reinterpret_cast<const uint32_t*>(&wv[j]) + p * kWordsPerPiece;
          float d[8];
#pragma unroll
          for (int e = 0; e < 8; ++e) {
            const uint32_t u =
                kBits == 4 ? (words[0] >> (4 * e)) & 0xFu : (words[e / 4] >> (8 * (e % 4))) & 0xFFu;
            d[e] = int_code_minus_zero(u, sz.y);
          }
#pragma unroll
          for (int m = 0; m < kMaxRows; ++m) {
            if (m < rows) {
              float dot = 0.0f;
#pragma unroll
              for (int e = 0; e < 8; ++e) dot = fmaf(d[e], xf[m][e], dot);
              acc[j][m] = fmaf(sz.x, dot, acc[j][m]);
            }
          }
        }
      }
    }
  } else {
    for (int64_t k = part * 32 + lane; k < w.in; k += stride) {
      const int64_t g = int_group_of(w, k);
      float xk[kMaxRows];
#pragma unroll
      for (int m = 0; m < kMaxRows; ++m) xk[m] = m < rows ? to_float(x[m * w.in + k]) : 0.0f;
#pragma unroll
      for (int j = 0; j < kIntGemvTileRows; ++j) {
        const uint32_t u = int_code_of<kBits>(w.codes + row[j] * w.row_bytes, k);
        const float2 sz = w.params[row[j] * w.groups + g];
        const float wk = sz.x * int_code_minus_zero(u, sz.y);
#pragma unroll
        for (int m = 0; m < kMaxRows; ++m) {
          if (m < rows) acc[j][m] = fmaf(wk, xk[m], acc[j][m]);
        }
      }
    }
  }

  // Every lane of every warp reaches the shuffles and the barrier (no early return above).
#pragma unroll
  for (int j = 0; j < kIntGemvTileRows; ++j) {
#pragma unroll
    for (int m = 0; m < kMaxRows; ++m) acc[j][m] = warp_sum(acc[j][m]);
  }
  if (warps_per_tile > 1) {
    if (lane == 0) {
#pragma unroll
      for (int j = 0; j < kIntGemvTileRows; ++j) {
#pragma unroll
        for (int m = 0; m < kMaxRows; ++m) partial[warp][j][m] = acc[j][m];
      }
    }
    __syncthreads();
    if (part != 0) return;
#pragma unroll
    for (int j = 0; j < kIntGemvTileRows; ++j) {
#pragma unroll
      for (int m = 0; m < kMaxRows; ++m) {
        float s = 0.0f;
        for (int q = 0; q < warps_per_tile; ++q) s += partial[warp + q][j][m];
        acc[j][m] = s;
      }
    }
  }
  if (lane != 0) return;
#pragma unroll
  for (int j = 0; j < kIntGemvTileRows; ++j) {
    const int64_t n = n0 + j;
    if (n >= w.out) continue;
    const float b = bias != nullptr ? to_float(bias[n]) : 0.0f;
#pragma unroll
    for (int m = 0; m < kMaxRows; ++m) {
      if (m < rows) y[m * w.out + n] = from_float<T>(fmaf(alpha, acc[j][m], b));
    }
  }
}

template <typename T, int kBits, int kMaxRows>
void launch_int_gemv_rows(const IntLinearWeights& w, const IntGemvArgs& a, cudaStream_t stream) {
  const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  const bool vector = int_gemv_vectorized(w) && aligned(a.x) && aligned(w.codes);
  // Work units per row: 16-byte chunks on the vector path, codes on the scalar one. Split `in`
  // while the launch has fewer than kIntGemvTargetWarps warps and every lane keeps a unit.
  const int64_t units = vector ? w.in / (128 / kBits) : w.in;
  const int64_t tiles = (w.out + kIntGemvTileRows - 1) / kIntGemvTileRows;
  int warps_per_tile = 1;
  while (warps_per_tile < kIntGemvWarps && tiles * warps_per_tile < kIntGemvTargetWarps &&
         units >= 2 * 32 * static_cast<int64_t>(warps_per_tile)) {
    warps_per_tile *= 2;
  }
  const int64_t tiles_per_block = kIntGemvWarps / warps_per_tile;
  const int64_t blocks = (tiles + tiles_per_block - 1) / tiles_per_block;
  MG_ASSERT(blocks <= 0x7fffffff, "int gemv: {} output features", w.out);
  const T* x = static_cast<const T*>(a.x);
  const T* bias = static_cast<const T*>(a.bias);
  T* y = static_cast<T*>(a.y);
  const int rows = static_cast<int>(a.rows);
  if (vector) {
    int_gemv_kernel<T, kBits, kMaxRows, true>
        <<<static_cast<unsigned>(blocks), kIntGemvThreads, 0, stream>>>(w, x, bias, y, rows,
                                                                        a.alpha, warps_per_tile);
  } else {
    int_gemv_kernel<T, kBits, kMaxRows, false>
        <<<static_cast<unsigned>(blocks), kIntGemvThreads, 0, stream>>>(w, x, bias, y, rows,
                                                                        a.alpha, warps_per_tile);
  }
  MG_CUDA_CHECK_LAUNCH();
}

template <typename T, int kBits>
void launch_int_gemv_bits(const IntLinearWeights& w, const IntGemvArgs& a, cudaStream_t stream) {
  if (a.rows == 1) return launch_int_gemv_rows<T, kBits, 1>(w, a, stream);
  if (a.rows == 2) return launch_int_gemv_rows<T, kBits, 2>(w, a, stream);
  return launch_int_gemv_rows<T, kBits, 4>(w, a, stream);  // 3 or 4 (kIntGemvMaxRows)
}

template <typename T>
void launch_int_gemv(const IntLinearWeights& w, const IntGemvArgs& a, cudaStream_t stream) {
  MG_ASSERT(a.rows >= 1 && a.rows <= kIntGemvMaxRows && w.in > 0 && w.out > 0 &&
                (w.bits == 4 || w.bits == 8) && w.groups >= 1 && w.group_cols >= 1,
            "int gemv: {} rows, {} bits, in {} out {} groups {} of {}", a.rows, w.bits, w.in, w.out,
            w.groups, w.group_cols);
  if (w.bits == 4) return launch_int_gemv_bits<T, 4>(w, a, stream);
  return launch_int_gemv_bits<T, 8>(w, a, stream);
}

// One thread per piece of 8 consecutive columns of a row (the last piece of a row may be short).
template <typename T, int kBits>
__global__ void int_dequant_kernel(const IntLinearWeights w, T* __restrict__ out) {
  const int64_t pieces_per_row = (w.in + 7) / 8;
  const int64_t n = w.out * pieces_per_row;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / pieces_per_row, k0 = (i % pieces_per_row) * 8;
    const uint8_t* codes = w.codes + r * w.row_bytes;
    const float2* params = w.params + r * w.groups;
    T* dst = out + r * w.in;
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const int64_t k = k0 + e;
      if (k < w.in) {
        const float2 sz = params[int_group_of(w, k)];
        dst[k] = from_float<T>(int_code_minus_zero(int_code_of<kBits>(codes, k), sz.y) * sz.x);
      }
    }
  }
}

template <typename T>
void launch_int_dequant(const IntLinearWeights& w, void* w_out, cudaStream_t stream) {
  MG_ASSERT(w.in > 0 && w.out > 0 && (w.bits == 4 || w.bits == 8),
            "int dequant: {} bits, in {} out {}", w.bits, w.in, w.out);
  constexpr int kThreads = 256;
  const unsigned blocks = grid_stride_blocks(w.out * ((w.in + 7) / 8), kThreads);
  if (w.bits == 4) {
    int_dequant_kernel<T, 4><<<blocks, kThreads, 0, stream>>>(w, static_cast<T*>(w_out));
  } else {
    int_dequant_kernel<T, 8><<<blocks, kThreads, 0, stream>>>(w, static_cast<T*>(w_out));
  }
  MG_CUDA_CHECK_LAUNCH();
}

}  // namespace mg::cuda
