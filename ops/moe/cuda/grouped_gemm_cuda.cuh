// Grouped expert GEMM kernels (included by grouped_gemm_cuda_<dtype>.cu).
//
// One launch covers every expert. Each CTA maps an m tile to (expert, first row) by counting
// ceil(rows_e / BM) tiles over expert_offsets (find_tile). Tiles are ordered in groups of kGroupM
// m tiles so that CTAs running together share weight tiles (m) and activation tiles (n) in L2.
//
// BF16/F16, tensor cores with fp32 accumulators:
// - grouped_gemm_tma.cuh (sm_90a, above 16 rows per expert): persistent CTAs, one per SM, take
//   tiles from a device counter; a producer warp feeds a 4-stage ring of 128 × 256-weight-row
//   tiles by TMA on mbarriers, two consumer warpgroups run wgmma m64n256k16 and store (GEMM2
//   through shared memory) while the next tile loads.
// - grouped_gemm_mma.cuh: mma.sync for the decode tiles (up to 16 rows per expert: weight
//   streaming) and, without sm_90a, for every size; grid = an upper bound of (m tile, n tile)
//   pairs, CTAs past the last real tile exit; multi-stage cp.async into XOR-swizzled shared memory.
// - grouped_gemm_wgmma.cuh: the cp.async-fed wgmma kernel of the large tiles, on sm_90a where the
//   TMA kernel's boxes do not fit (plain N < 256) and where it measured faster (gated, long K).
// F32: a plain shared-memory tiled FFMA kernel here, the exact reference mode.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>

#include "framework/core/error.h"
#include "framework/device/cuda/cuda_check.h"
#include "ops/moe/cuda/grouped_gemm_common.cuh"
#include "ops/moe/cuda/grouped_gemm_mma.cuh"
#include "ops/moe/cuda/grouped_gemm_tma.cuh"
#include "ops/moe/cuda/grouped_gemm_wgmma.cuh"

namespace mg::cuda {
namespace grouped_gemm {
// ---------------------------------------------------------------------------------------------
// F32 path: 64×64 output tiles, 256 threads with 4×4 outputs each, k steps of 16.

inline constexpr int kF32BM = 64, kF32BN = 64, kF32BK = 16, kF32Threads = 256;

template <bool Gated>
__global__ void __launch_bounds__(kF32Threads)
    grouped_gemm_f32_kernel(const GroupedGemmArgs args, int m_tiles_bound, int n_tiles) {
  constexpr int BM = kF32BM, BN = kF32BN, BK = kF32BK;
  constexpr int kBRows = Gated ? 2 * BN : BN;
  __shared__ float s_a[BK][BM + 1];
  __shared__ float s_b[BK][kBRows + 1];

  int m_tile, n_tile;
  tile_coords(m_tiles_bound, n_tiles, m_tile, n_tile);
  TileWork work;
  if (!find_tile<BM>(args.expert_offsets, static_cast<int>(args.num_experts), m_tile, work)) {
    return;
  }
  const int tid = static_cast<int>(threadIdx.x);
  const int tx = tid % 16, ty = tid / 16;
  const int n = static_cast<int>(args.n), k = static_cast<int>(args.k);
  const int64_t b_rows_per_expert = Gated ? 2 * args.n : args.n;
  const int rows_here = work.row_end - work.row_begin;
  const int n0 = n_tile * BN;
  const float* a = static_cast<const float*>(args.a) + static_cast<int64_t>(work.row_begin) * k;
  const float* b = static_cast<const float*>(args.b) + work.expert * b_rows_per_expert * k;

  float acc[4][4] = {};
  float acc_up[4][4] = {};
  for (int k0 = 0; k0 < k; k0 += BK) {
    // Consecutive threads read consecutive k of one row (coalesced 64-byte pieces).
    for (int i = tid; i < BM * BK; i += kF32Threads) {
      const int row = i / BK, kk = i % BK;
      s_a[kk][row] =
          row < rows_here && k0 + kk < k ? a[static_cast<int64_t>(row) * k + k0 + kk] : 0.0f;
    }
    for (int i = tid; i < kBRows * BK; i += kF32Threads) {
      const int row = i / BK, kk = i % BK;
      const bool up = Gated && row >= BN;
      const int col = n0 + (up ? row - BN : row);
      s_b[kk][row] =
          col < n && k0 + kk < k ? b[static_cast<int64_t>(up ? n + col : col) * k + k0 + kk] : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < BK; ++kk) {
      float av[4], bv[4], uv[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) av[i] = s_a[kk][ty + 16 * i];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        bv[j] = s_b[kk][tx + 16 * j];
        uv[j] = Gated ? s_b[kk][(Gated ? BN : 0) + tx + 16 * j] : 0.0f;
      }
#pragma unroll
      for (int i = 0; i < 4; ++i) {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
          if constexpr (Gated) acc_up[i][j] = fmaf(av[i], uv[j], acc_up[i][j]);
        }
      }
    }
    __syncthreads();
  }

  const float* bias = args.bias == nullptr
                          ? nullptr
                          : static_cast<const float*>(args.bias) + work.expert * b_rows_per_expert;
  float* c = static_cast<float*>(args.c) + static_cast<int64_t>(work.row_begin) * n;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int row = ty + 16 * i;
    if (row >= rows_here) continue;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int col = n0 + tx + 16 * j;
      if (col >= n) continue;
      c[static_cast<int64_t>(row) * n + col] =
          epilogue_value<float, Gated>(args, bias, col, acc[i][j], acc_up[i][j]);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Host side.

// An upper bound of the m tiles: every expert's last tile may be partial, and at most
// min(E, rows) experts have rows.
inline int64_t m_tiles_bound(const GroupedGemmArgs& args, int bm) {
  return (args.max_rows + bm - 1) / bm + std::min(args.num_experts, args.max_rows);
}

template <typename T, class Tile, bool Gated>
void launch_mma(const GroupedGemmArgs& args, cudaStream_t stream) {
  const int64_t m_bound = m_tiles_bound(args, Tile::BM);
  const int64_t n_tiles = (args.n + Tile::BN - 1) / Tile::BN;
  const int64_t blocks = m_bound * n_tiles;
  MG_CHECK(blocks <= INT32_MAX, "grouped GEMM: {} tiles exceed the grid", blocks);
  constexpr int kSmem = Tile::template smem_bytes<Gated>();
  auto* kernel = grouped_gemm_mma_kernel<T, Tile, Gated>;
  // Above 48 KB a kernel must opt in; this is a host-side attribute, not a stream operation.
  MG_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  kernel<<<static_cast<unsigned>(blocks), Tile::kThreads, kSmem, stream>>>(
      args, static_cast<int>(m_bound), static_cast<int>(n_tiles));
  MG_CUDA_CHECK_LAUNCH();
}

// Tile configs (chosen by launch_mma_by_size from bf16 sweeps of every config over the four model
// shapes on an H100; .scratch-gemm/NOTES.md):
// - decode: 16-row tiles; the weights are nearly all the bytes, so narrow N (enough CTAs to
//   stream weights) and 8 stages (80 KB, two CTAs per SM) keep ~160 KB of loads in flight per SM.
// - bm32 / mid: 32- and 64-row tiles with 4 warps, 4 stages, two CTAs per SM: one CTA's prologue
//   and epilogue overlap the other's main loop, which wins for short K and moderate rows.
// - large: 128 rows × 256 weight rows (gated: 128 output columns, plain: 256), 4 stages of
//   48 KB; wgmma on sm_90a (grouped_gemm_wgmma.cuh); the mma.sync plain tile (8 warps of 64 × 64)
//   where it measured faster (K <= 2048) or without sm_90a.
using DecodeGatedTile = MmaTile<16, 32, 1, 2, 8, 2>;
using DecodePlainTile = MmaTile<16, 64, 1, 4, 8, 2>;
using Bm32PlainTile = MmaTile<32, 128, 1, 4, 4, 2>;
using MidGatedTile = MmaTile<64, 64, 2, 2, 4, 2>;
using MidPlainTile = MmaTile<64, 128, 2, 2, 4, 2>;
using LargePlainTile = MmaTile<128, 256, 2, 4, 4, 1>;

// True when the loaded cubin holds the sm_90a kernels (wgmma and TMA, compiled under the same
// MG_GROUPED_GEMM_WGMMA): the wgmma kernel's body needs >= 128 registers (the 128 accumulators
// alone), the empty sm_90 stand-in a handful. A host-side attribute query, so the launchers stay
// capturable; asked once per process and dtype.
template <typename T>
bool wgmma_available() {
  static const bool available = [] {
    cudaFuncAttributes attr{};
    if (cudaFuncGetAttributes(&attr, grouped_gemm_wgmma_kernel<T, false, 1>) != cudaSuccess) {
      (void)cudaGetLastError();
      return false;
    }
    return attr.numRegs >= 128;
  }();
  return available;
}

template <typename T, bool Gated, int InFlight = 1>
void launch_wgmma(const GroupedGemmArgs& args, cudaStream_t stream) {
  const int64_t m_bound = m_tiles_bound(args, WgmmaTile::BM);
  constexpr int kBN = Gated ? WgmmaTile::BRows / 2 : WgmmaTile::BRows;
  const int64_t n_tiles = (args.n + kBN - 1) / kBN;
  const int64_t blocks = m_bound * n_tiles;
  MG_CHECK(blocks <= INT32_MAX, "grouped GEMM: {} tiles exceed the grid", blocks);
  auto* kernel = grouped_gemm_wgmma_kernel<T, Gated, InFlight>;
  MG_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     WgmmaTile::kSmemBytes));
  kernel<<<static_cast<unsigned>(blocks), WgmmaTile::kThreads, WgmmaTile::kSmemBytes, stream>>>(
      args, static_cast<int>(m_bound), static_cast<int>(n_tiles));
  MG_CUDA_CHECK_LAUNCH();
}

// The persistent TMA kernel: one CTA per SM (fewer when the problem has fewer tiles); the tensor
// maps are encoded here, on the host, for this launch's pointers and sizes.
template <typename T, bool Gated, bool kDynamic = true, bool kStaged = true>
void launch_tma(const GroupedGemmArgs& args, cudaStream_t stream) {
  MG_ASSERT(tma_shape_ok(args, Gated), "grouped GEMM: N {} K {} rows {} too small for TMA boxes",
            args.n, args.k, args.max_rows);
  const int64_t m_bound = m_tiles_bound(args, TmaTile::BM);
  constexpr int kBN = Gated ? TmaTile::BRows / 2 : TmaTile::BRows;
  const int64_t n_tiles = (args.n + kBN - 1) / kBN;
  const int64_t tiles = m_bound * n_tiles;
  MG_CHECK(tiles <= INT32_MAX, "grouped GEMM: {} tiles exceed 32-bit tile indices", tiles);
  int device = 0, sms = 0;
  MG_CUDA_CHECK(cudaGetDevice(&device));
  MG_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  const CUtensorMap map_a = tma_map_a<T>(args);
  const CUtensorMap map_b = tma_map_b<T, Gated>(args);
  auto* kernel = grouped_gemm_tma_kernel<T, Gated, kDynamic, kStaged>;
  constexpr int kSmem = TmaTile::smem_bytes<kStaged>();
  MG_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  const int64_t blocks = std::min<int64_t>(sms, tiles);
  kernel<<<static_cast<unsigned>(blocks), TmaTile::kThreads, kSmem, stream>>>(
      map_a, map_b, args, static_cast<int>(n_tiles), kDynamic ? tile_counter_slot() : 0u);
  MG_CUDA_CHECK_LAUNCH();
}

// Picks the kernel from the average rows per expert (max_rows / E) and K, from bf16 sweeps of
// every kernel over the four model shapes on an H100 (.scratch-gemm/NOTES.md):
// - up to 16 rows per expert: the decode tiles (weight streaming);
// - above, on sm_90a wherever its boxes fit: the persistent TMA kernel with the dynamic tile
//   scheduler; plain (GEMM2) stores through shared memory, gated (GEMM1: 64 outputs a thread
//   after the activation) straight from the accumulators, which measured faster there. Gated
//   K >= 4096 with 128 to 512 rows per expert stays on the cp.async wgmma kernel: 16% faster on
//   deepseek-v3 at 4096 tokens in two runs, 1-9% at deepseek-v3 16384 and mixtral 1024 tokens
//   (within the runs' noise there).
// - without sm_90a (or N below the TMA boxes): the older rules: gated GEMM1 keeps 64-row tiles
//   up to large problems (its 2·BN weight rows already make the mid tile wide); short K favours
//   the small tiles (two CTAs per SM hide the per-tile prologue and epilogue).
template <typename T, bool Gated>
void launch_mma_by_size(const GroupedGemmArgs& args, cudaStream_t stream) {
  const int64_t rows_per_expert = args.max_rows / args.num_experts;
  if (rows_per_expert > 16 && tma_shape_ok(args, Gated) && wgmma_available<T>()) {
    if constexpr (Gated) {
      if (args.k >= 4096 && rows_per_expert >= 128 && rows_per_expert <= 512) {
        return launch_wgmma<T, true>(args, stream);
      }
      return launch_tma<T, true, /*kDynamic=*/true, /*kStaged=*/false>(args, stream);
    } else {
      return launch_tma<T, false, /*kDynamic=*/true, /*kStaged=*/true>(args, stream);
    }
  }
  if constexpr (Gated) {
    if (rows_per_expert <= 16) return launch_mma<T, DecodeGatedTile, true>(args, stream);
    if (rows_per_expert <= 256 || args.k <= 2048 || !wgmma_available<T>()) {
      return launch_mma<T, MidGatedTile, true>(args, stream);
    }
    return launch_wgmma<T, true>(args, stream);
  } else {
    if (rows_per_expert <= 16) return launch_mma<T, DecodePlainTile, false>(args, stream);
    if (rows_per_expert <= 64 || args.k <= 1024) {
      return launch_mma<T, Bm32PlainTile, false>(args, stream);
    }
    if (args.k <= 2048 || !wgmma_available<T>()) {
      return launch_mma<T, LargePlainTile, false>(args, stream);
    }
    return launch_wgmma<T, false>(args, stream);
  }
}

template <bool Gated>
void launch_f32(const GroupedGemmArgs& args, cudaStream_t stream) {
  const int64_t m_bound = m_tiles_bound(args, kF32BM);
  const int64_t n_tiles = (args.n + kF32BN - 1) / kF32BN;
  const int64_t blocks = m_bound * n_tiles;
  MG_CHECK(blocks <= INT32_MAX, "grouped GEMM: {} tiles exceed the grid", blocks);
  grouped_gemm_f32_kernel<Gated><<<static_cast<unsigned>(blocks), kF32Threads, 0, stream>>>(
      args, static_cast<int>(m_bound), static_cast<int>(n_tiles));
  MG_CUDA_CHECK_LAUNCH();
}

}  // namespace grouped_gemm

template <typename T>
void launch_grouped_gemm(const GroupedGemmArgs& args, cudaStream_t stream) {
  const std::string reason = grouped_gemm_check(args.n, args.k);
  MG_CHECK(reason.empty(), "grouped GEMM: {}", reason);
  if (args.num_experts <= 0 || args.max_rows <= 0) return;
  const bool gated = args.epilogue == GroupedEpilogue::kActivation && is_gated(args.act.kind);
  if constexpr (std::is_same_v<T, float>) {
    return gated ? grouped_gemm::launch_f32<true>(args, stream)
                 : grouped_gemm::launch_f32<false>(args, stream);
  } else {
    return gated ? grouped_gemm::launch_mma_by_size<T, true>(args, stream)
                 : grouped_gemm::launch_mma_by_size<T, false>(args, stream);
  }
}

}  // namespace mg::cuda
