// The mma.sync (m16n8k16) grouped GEMM kernel for BF16 / F16: every tile size, any sm_80+ GPU.
// ldmatrix from XOR-swizzled shared memory, filled by a multi-stage cp.async pipeline (one barrier
// per 64-wide k step).
#pragma once

#include "ops/moe/cuda/grouped_gemm_common.cuh"

namespace mg::cuda {
namespace grouped_gemm {

// A tile shape of the mma kernel. BN counts output columns; a gated CTA streams 2·BN weight rows
// (gate rows n0.. and up rows N+n0..) so the activation pairs gate and up in registers.
// Shared memory per stage: A [BM][64] and B [BRows][64], rows of 128 bytes whose eight 16-byte
// chunks are XOR-swizzled by (row & 7) so that ldmatrix and cp.async hit distinct banks.
template <int BM_, int BN_, int WarpsM, int WarpsN, int Stages_, int MinBlocks_>
struct MmaTile {
  static constexpr int BM = BM_, BN = BN_, BK = 64, Stages = Stages_, MinBlocks = MinBlocks_;
  static constexpr int kWarpsM = WarpsM, kWarpsN = WarpsN;
  static constexpr int kThreads = WarpsM * WarpsN * 32;
  static constexpr int WM = BM / WarpsM, WN = BN / WarpsN;
  static constexpr int MI = WM / 16, NI = WN / 8;
  static_assert(WM % 16 == 0 && WN % 16 == 0, "warp tile: 16-row A and 16-column B ldmatrix");
  template <bool Gated>
  __host__ __device__ static constexpr int b_rows() {
    return Gated ? 2 * BN : BN;
  }
  template <bool Gated>
  __host__ __device__ static constexpr int stage_bytes() {
    return (BM + b_rows<Gated>()) * BK * 2;
  }
  template <bool Gated>
  __host__ __device__ static constexpr int smem_bytes() {
    return Stages * stage_bytes<Gated>();
  }
};

template <typename T, class Tile, bool Gated>
__global__ void __launch_bounds__(Tile::kThreads, Tile::MinBlocks)
    grouped_gemm_mma_kernel(const GroupedGemmArgs args, int m_tiles_bound, int n_tiles) {
  constexpr int BM = Tile::BM, BN = Tile::BN, BK = Tile::BK, kStages = Tile::Stages;
  constexpr int MI = Tile::MI, NI = Tile::NI, kThreads = Tile::kThreads;
  constexpr int kABytes = BM * BK * 2;
  constexpr int kStageBytes = Tile::template stage_bytes<Gated>();
  extern __shared__ __align__(128) uint8_t smem[];

  int m_tile, n_tile;
  tile_coords(m_tiles_bound, n_tiles, m_tile, n_tile);
  TileWork work;
  if (!find_tile<BM>(args.expert_offsets, static_cast<int>(args.num_experts), m_tile, work)) {
    return;
  }

  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid & 31, warp = tid >> 5;
  const int warp_m = warp / Tile::kWarpsN, warp_n = warp % Tile::kWarpsN;
  const int n = static_cast<int>(args.n), k = static_cast<int>(args.k);
  const int64_t b_rows_per_expert = Gated ? 2 * args.n : args.n;
  const int rows_here = work.row_end - work.row_begin;
  const int n0 = n_tile * BN;
  const T* a = static_cast<const T*>(args.a) + static_cast<int64_t>(work.row_begin) * k;
  const T* b = static_cast<const T*>(args.b) + work.expert * b_rows_per_expert * k;
  const uint32_t smem_base = smem_u32(smem);

  auto load_stage = [&](int stage, int k_tile) {
    const uint32_t s_a = smem_base + stage * kStageBytes;
    load_tile_stage<T, BM, BN, kThreads, Gated>(s_a, s_a + kABytes, a, b, rows_here, n0, n, k,
                                                k_tile * BK, tid);
  };

  float acc[MI][NI][4];
  float acc_up[Gated ? MI : 1][Gated ? NI : 1][4];
#pragma unroll
  for (int mi = 0; mi < MI; ++mi) {
#pragma unroll
    for (int ni = 0; ni < NI; ++ni) {
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        acc[mi][ni][q] = 0.0f;
        if constexpr (Gated) acc_up[mi][ni][q] = 0.0f;
      }
    }
  }

  const int k_tiles = (k + BK - 1) / BK;
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < k_tiles) load_stage(s, s);
    cp_async_commit();
  }

  // ldmatrix lanes: A x4 = rows 0-15 at chunks (2kk, 2kk+1); B x4 = two n8 blocks × two k halves.
  const int a_row = warp_m * Tile::WM + (lane & 15);
  const int a_chunk = lane >> 4;
  const int b_row = warp_n * Tile::WN + (lane & 7) + ((lane >> 4) << 3);
  const int b_chunk = (lane >> 3) & 1;

  for (int kt = 0; kt < k_tiles; ++kt) {
    // Stage kt has landed for this thread; the barrier makes it visible to all and also says
    // every warp is done with the stage the next load overwrites (read in iteration kt - 1).
    cp_async_wait<kStages - 2>();
    __syncthreads();
    const int next = kt + kStages - 1;
    if (next < k_tiles) load_stage(next % kStages, next);
    cp_async_commit();

    const uint32_t s_a = smem_base + (kt % kStages) * kStageBytes;
    const uint32_t s_b = s_a + kABytes;
#pragma unroll
    for (int kk = 0; kk < BK / 16; ++kk) {
      uint32_t af[MI][4];
#pragma unroll
      for (int mi = 0; mi < MI; ++mi) {
        ldmatrix_x4(af[mi], s_a + swizzled(a_row + mi * 16, kk * 2 + a_chunk));
      }
      uint32_t bf[NI][2];
      uint32_t bu[Gated ? NI : 1][2];
#pragma unroll
      for (int nj = 0; nj < NI / 2; ++nj) {
        uint32_t r[4];
        ldmatrix_x4(r, s_b + swizzled(b_row + nj * 16, kk * 2 + b_chunk));
        bf[2 * nj][0] = r[0];
        bf[2 * nj][1] = r[1];
        bf[2 * nj + 1][0] = r[2];
        bf[2 * nj + 1][1] = r[3];
        if constexpr (Gated) {
          ldmatrix_x4(r, s_b + swizzled(BN + b_row + nj * 16, kk * 2 + b_chunk));
          bu[2 * nj][0] = r[0];
          bu[2 * nj][1] = r[1];
          bu[2 * nj + 1][0] = r[2];
          bu[2 * nj + 1][1] = r[3];
        }
      }
#pragma unroll
      for (int mi = 0; mi < MI; ++mi) {
#pragma unroll
        for (int ni = 0; ni < NI; ++ni) {
          mma_16816<T>(acc[mi][ni], af[mi], bf[ni]);
          if constexpr (Gated) mma_16816<T>(acc_up[mi][ni], af[mi], bu[ni]);
        }
      }
    }
  }
  cp_async_wait<0>();

  // Epilogue straight from the accumulators: lane (g, t) holds rows g and g+8, columns 2t, 2t+1
  // of each 16×8 block.
  const T* bias = args.bias == nullptr
                      ? nullptr
                      : static_cast<const T*>(args.bias) + work.expert * b_rows_per_expert;
  T* c = static_cast<T*>(args.c) + static_cast<int64_t>(work.row_begin) * n;
  const bool pair_stores = (n & 1) == 0;
#pragma unroll
  for (int mi = 0; mi < MI; ++mi) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int row = warp_m * Tile::WM + mi * 16 + (lane >> 2) + half * 8;
      if (row >= rows_here) continue;
      T* c_row = c + static_cast<int64_t>(row) * n;
#pragma unroll
      for (int ni = 0; ni < NI; ++ni) {
        const int col = n0 + warp_n * Tile::WN + ni * 8 + (lane & 3) * 2;
        if (col >= n) continue;
        const float up0 = Gated ? acc_up[Gated ? mi : 0][Gated ? ni : 0][half * 2] : 0.0f;
        const float up1 = Gated ? acc_up[Gated ? mi : 0][Gated ? ni : 0][half * 2 + 1] : 0.0f;
        const float v0 = epilogue_value<T, Gated>(args, bias, col, acc[mi][ni][half * 2], up0);
        if (pair_stores) {
          const float v1 =
              epilogue_value<T, Gated>(args, bias, col + 1, acc[mi][ni][half * 2 + 1], up1);
          store_pair(c_row + col, v0, v1);
        } else {
          c_row[col] = from_float<T>(v0);
          if (col + 1 < n) {
            c_row[col + 1] = from_float<T>(
                epilogue_value<T, Gated>(args, bias, col + 1, acc[mi][ni][half * 2 + 1], up1));
          }
        }
      }
    }
  }
}

}  // namespace grouped_gemm
}  // namespace mg::cuda
