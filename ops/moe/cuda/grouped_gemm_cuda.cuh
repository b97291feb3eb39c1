// Grouped expert GEMM kernels (included by grouped_gemm_cuda_<dtype>.cu).
//
// One launch covers every expert. Each CTA maps an m tile to (expert, first row) by counting
// ceil(rows_e / BM) tiles over expert_offsets (find_tile). Tiles are ordered in groups of kGroupM
// m tiles so that CTAs running together share weight tiles (m) and activation tiles (n) in L2.
//
// BF16/F16, tensor cores with fp32 accumulators (the caller names the kernel, GroupedGemmKernel;
// ops/moe/heuristics/unquantized_kernel_choice.h chooses it):
// - grouped_gemm_tma.cuh (tma, sm_90a): persistent CTAs, one per SM, take
//   tiles from a device counter; a producer warp feeds a 4-stage ring of 128 × 256-weight-row
//   tiles by TMA on mbarriers, two consumer warpgroups run wgmma m64n256k16 and store (GEMM2
//   through shared memory) while the next tile loads.
// - grouped_gemm_mma.cuh (mma16/32/64/128, any sm_80+ GPU): mma.sync tiles of 16 to 128 rows;
//   grid = an upper bound of (m tile, n tile) pairs, CTAs past the last real tile exit;
//   multi-stage cp.async into XOR-swizzled shared memory.
// - grouped_gemm_wgmma.cuh (wgmma, sm_90a): the cp.async-fed wgmma kernel of 128 x 256 tiles.
// F32 (ffma): a plain shared-memory tiled FFMA kernel here, the exact reference mode.
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

// Tile configs of the mma.sync kernel (GroupedGemmKernel::kMma16 / 32 / 64 / 128; which one runs
// is chosen in ops/moe/heuristics/unquantized_kernel_choice.cc):
// - mma16: 16-row tiles for decode-sized groups; the weights are nearly all the bytes, so narrow
//   N (enough CTAs to stream weights) and 8 stages (80 KB, two CTAs per SM) keep ~160 KB of loads
//   in flight per SM.
// - mma32 (plain) / mma64 (gated): 32- and 64-row tiles with 4 warps, 4 stages, two CTAs per SM:
//   one CTA's prologue and epilogue overlap the other's main loop (short K, moderate rows).
// - mma128 (plain): 128 rows x 256 columns, 8 warps of 64 x 64, 4 stages of 48 KB.
using DecodeGatedTile = MmaTile<16, 32, 1, 2, 8, 2>;
using DecodePlainTile = MmaTile<16, 64, 1, 4, 8, 2>;
using Bm32PlainTile = MmaTile<32, 128, 1, 4, 4, 2>;
using MidGatedTile = MmaTile<64, 64, 2, 2, 4, 2>;
using LargePlainTile = MmaTile<128, 256, 2, 4, 4, 1>;

static_assert(TmaTile::BK == kTmaBoxK && TmaTile::BRows == kTmaWeightBoxRows && kTmaBoxRows == 64,
              "grouped_gemm_kernels.h's TMA box constants");

// True when the loaded cubin holds the sm_90a kernels (wgmma and TMA, compiled under the same
// MG_GROUPED_GEMM_WGMMA): the wgmma kernel's body needs >= 128 registers (the 128 accumulators
// alone), the empty sm_90 stand-in a handful. A host-side attribute query, so the launchers stay
// capturable; asked once per process and dtype.
template <typename T>
bool wgmma_available() {
  static const bool available = [] {
    cudaFuncAttributes attr{};
    if (cudaFuncGetAttributes(&attr, grouped_gemm_wgmma_kernel<T, false>) != cudaSuccess) {
      (void)cudaGetLastError();
      return false;
    }
    return attr.numRegs >= 128;
  }();
  return available;
}

template <typename T, bool Gated>
void launch_wgmma(const GroupedGemmArgs& args, cudaStream_t stream) {
  MG_CHECK(wgmma_available<T>(),
           "grouped GEMM: wgmma needs the sm_90a kernels, which this GPU or build lacks");
  const int64_t m_bound = m_tiles_bound(args, WgmmaTile::BM);
  constexpr int kBN = Gated ? WgmmaTile::BRows / 2 : WgmmaTile::BRows;
  const int64_t n_tiles = (args.n + kBN - 1) / kBN;
  const int64_t blocks = m_bound * n_tiles;
  MG_CHECK(blocks <= INT32_MAX, "grouped GEMM: {} tiles exceed the grid", blocks);
  auto* kernel = grouped_gemm_wgmma_kernel<T, Gated>;
  MG_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     WgmmaTile::kSmemBytes));
  kernel<<<static_cast<unsigned>(blocks), WgmmaTile::kThreads, WgmmaTile::kSmemBytes, stream>>>(
      args, static_cast<int>(m_bound), static_cast<int>(n_tiles));
  MG_CUDA_CHECK_LAUNCH();
}

// The persistent TMA kernel: one CTA per SM (fewer when the problem has fewer tiles), tiles from
// the dynamic scheduler; the tensor maps are encoded here, on the host, for this launch's pointers
// and sizes. Plain GEMMs (GEMM2) store through shared memory (kStaged), gated GEMM1 (64 outputs a
// thread after the activation) straight from the accumulators, which was faster there in the
// kernel author's sweeps (H100, the four bench shapes; a harness not in the repository).
template <typename T, bool Gated>
void launch_tma(const GroupedGemmArgs& args, cudaStream_t stream) {
  MG_CHECK(wgmma_available<T>(),
           "grouped GEMM: tma needs the sm_90a kernels, which this GPU or build lacks");
  MG_CHECK(tma_shape_ok(args, Gated),
           "grouped GEMM: tma's boxes need K >= 64, N >= {} and >= 64 rows, not N {} K {} rows {}",
           Gated ? TmaTile::BRows / 2 : TmaTile::BRows, args.n, args.k, args.max_rows);
  constexpr bool kStaged = !Gated;
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
  auto* kernel = grouped_gemm_tma_kernel<T, Gated, kStaged>;
  constexpr int kSmem = TmaTile::smem_bytes<kStaged>();
  MG_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  const int64_t blocks = std::min<int64_t>(sms, tiles);
  kernel<<<static_cast<unsigned>(blocks), TmaTile::kThreads, kSmem, stream>>>(
      map_a, map_b, args, static_cast<int>(n_tiles), tile_counter_slot());
  MG_CUDA_CHECK_LAUNCH();
}

// Runs `kernel` (BF16/F16). A kernel without a tile of this kind is an error naming the ones that
// have one (the heuristics never send one here; a test or a forced request may).
template <typename T, bool Gated>
void launch_tensor_core(const GroupedGemmArgs& args, GroupedGemmKernel kernel,
                        cudaStream_t stream) {
  const std::string_view name = grouped_gemm_kernel_name(kernel);
  switch (kernel) {
    case GroupedGemmKernel::kTma:
      return launch_tma<T, Gated>(args, stream);
    case GroupedGemmKernel::kWgmma:
      return launch_wgmma<T, Gated>(args, stream);
    case GroupedGemmKernel::kMma16:
      if constexpr (Gated) {
        return launch_mma<T, DecodeGatedTile, true>(args, stream);
      } else {
        return launch_mma<T, DecodePlainTile, false>(args, stream);
      }
    case GroupedGemmKernel::kMma64:
      if constexpr (Gated) return launch_mma<T, MidGatedTile, true>(args, stream);
      break;
    case GroupedGemmKernel::kMma32:
      if constexpr (!Gated) return launch_mma<T, Bm32PlainTile, false>(args, stream);
      break;
    case GroupedGemmKernel::kMma128:
      if constexpr (!Gated) return launch_mma<T, LargePlainTile, false>(args, stream);
      break;
    case GroupedGemmKernel::kFfma:
      MG_FAIL("grouped GEMM: ffma runs F32 only; BF16/F16 run mma16/32/64/128, wgmma or tma");
  }
  MG_FAIL("grouped GEMM: {} has no {} tile ({})", name, Gated ? "gated" : "plain",
          Gated ? "gated: mma16, mma64, wgmma, tma" : "plain: mma16, mma32, mma128, wgmma, tma");
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
void launch_grouped_gemm(const GroupedGemmArgs& args, GroupedGemmKernel kernel,
                         cudaStream_t stream) {
  const std::string reason = grouped_gemm_check(args.n, args.k);
  MG_CHECK(reason.empty(), "grouped GEMM: {}", reason);
  if (args.num_experts <= 0 || args.max_rows <= 0) return;
  const bool gated = args.epilogue == GroupedEpilogue::kActivation && is_gated(args.act.kind);
  if constexpr (std::is_same_v<T, float>) {
    MG_CHECK(kernel == GroupedGemmKernel::kFfma, "grouped GEMM: F32 runs ffma only, not {}",
             grouped_gemm_kernel_name(kernel));
    return gated ? grouped_gemm::launch_f32<true>(args, stream)
                 : grouped_gemm::launch_f32<false>(args, stream);
  } else {
    return gated ? grouped_gemm::launch_tensor_core<T, true>(args, kernel, stream)
                 : grouped_gemm::launch_tensor_core<T, false>(args, kernel, stream);
  }
}

}  // namespace mg::cuda
