// The FP8 grouped GEMM on mma.sync.m16n8k32 e4m3 (sm_89+), with the weight and activation block
// scales applied per 128-wide K block into fp32 accumulators. nvcc only; included by
// fp8_gemm_mma_<dtype>_<gated|plain>.cu.
//
// The structure is the BF16 mma kernel's (ops/moe/cuda/grouped_gemm_mma.cuh), in bytes: an e4m3
// row of 128 codes is 128 bytes, the same shared-memory row as 64 BF16 elements, and the m16n8k32
// e4m3 fragments have the byte layout of the m16n8k16 BF16 ones, so the XOR-swizzled tiles, the
// cp.async pipeline and the ldmatrix addressing carry over unchanged. One pipeline stage is one
// 128-wide K block, i.e. exactly one activation scale group: the MMAs of a stage accumulate into
// zeroed partial sums, which are then promoted into the fp32 accumulators,
//   acc[m][n] += partial[m][n] * (xs[m][kb] * S[e][n / block_n][kb * 128 / block_k]),
// as DeepGEMM does (the tensor cores' FP8 accumulation is not full fp32, so partial sums are kept
// to one block). Tails of rows, N and K are zero-filled by cp.async, so the MMAs need no masks.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>

#include "framework/core/error.h"
#include "framework/device/cuda/cuda_check.h"
#include "framework/device/cuda/cuda_utils.cuh"
#include "ops/moe/cuda/fp8/fp8_experts_cuda.h"
#include "ops/moe/cuda/fp8/fp8_gemm_launch.h"
#include "ops/moe/cuda/grouped_gemm_common.cuh"
#include "ops/moe/cuda/moe_activation_cuda.cuh"

namespace mg::cuda::fp8 {

// A tile of the FP8 mma kernel: BM rows × BN output columns (a gated CTA streams 2·BN weight rows:
// gate rows n0.. and up rows N+n0..), BK = 128 codes per stage.
template <int BM_, int BN_, int WarpsM, int WarpsN, int Stages_>
struct Fp8MmaTile {
  static constexpr int BM = BM_, BN = BN_, BK = 128, Stages = Stages_;
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
    return (BM + b_rows<Gated>()) * BK;
  }
  // Per stage, after all the stages' tiles: the K block's scales of the weight rows and the rows.
  template <bool Gated>
  __host__ __device__ static constexpr int scale_bytes() {
    return (b_rows<Gated>() + BM) * 4;
  }
  template <bool Gated>
  __host__ __device__ static constexpr int smem_bytes() {
    return Stages * (stage_bytes<Gated>() + scale_bytes<Gated>());
  }
};

// fp8_mma16: 16 rows, 4 warps side by side over 64 columns (gated: 128 weight rows), 4 stages
// (gated 74 KB, plain 41 KB). fp8_mma64: 64 rows, 2 × 4 warps, gated 64 columns (128 weight rows)
// or plain 128, 3 stages of 24 KB. Every thread keeps at most 32 outputs (64 registers with their
// per-block partial sums), so neither tile spills.
using Fp8Mma16Tile = Fp8MmaTile<16, 64, 1, 4, 4>;
using Fp8Mma64GatedTile = Fp8MmaTile<64, 64, 2, 4, 3>;
using Fp8Mma64PlainTile = Fp8MmaTile<64, 128, 2, 4, 3>;

__device__ __forceinline__ void mma_e4m3_16832(float (&d)[4], const uint32_t (&a)[4],
                                               const uint32_t (&b)[2]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
  __trap();  // FP8 mma.sync needs sm_89; the build targets sm_90
#endif
}

// cp.async of one stage: grouped_gemm::load_tile_stage with T = uint8_t (16 codes per 16-byte
// chunk, one 128-code K block per stage; K is a multiple of 16, so a chunk is all in or all out).
template <int BM, int BN, int kThreads, bool Gated>
__device__ __forceinline__ void load_stage(uint32_t s_a, uint32_t s_b, const uint8_t* a,
                                           const uint8_t* b, int rows_here, int n0, int n, int k,
                                           int k0, int tid) {
  grouped_gemm::load_tile_stage<uint8_t, BM, BN, kThreads, Gated>(s_a, s_b, a, b, rows_here, n0, n,
                                                                  k, k0, tid);
}

// The GEMM epilogue of one output (up only read when Gated); bias F32 [N_b] of the expert.
template <bool Gated>
__device__ __forceinline__ float epilogue_value(const Fp8GemmArgs& args, const float* bias, int col,
                                                float gate, float up) {
  if (bias != nullptr) gate += bias[col];
  if constexpr (Gated) {
    if (bias != nullptr) up += bias[args.n + col];
    return moe_activation(args.act, gate, up);
  } else {
    return args.epilogue == GroupedEpilogue::kActivation ? moe_activation(args.act, gate, 0.0f)
                                                         : gate;
  }
}

template <typename T, class Tile, bool Gated>
__global__ void __launch_bounds__(Tile::kThreads)
    fp8_gemm_mma_kernel(const Fp8GemmArgs args, int m_tiles_bound, int n_tiles) {
  using grouped_gemm::ldmatrix_x4;
  using grouped_gemm::swizzled;
  constexpr int BM = Tile::BM, BN = Tile::BN, BK = Tile::BK, kStages = Tile::Stages;
  constexpr int MI = Tile::MI, NI = Tile::NI, kThreads = Tile::kThreads;
  constexpr int kABytes = BM * BK;
  constexpr int kStageBytes = Tile::template stage_bytes<Gated>();
  constexpr int kUp = Gated ? 1 : 0;  // sizes of the up-row arrays: 1 element when plain
  extern __shared__ __align__(128) uint8_t smem[];

  int m_tile, n_tile;
  grouped_gemm::tile_coords(m_tiles_bound, n_tiles, m_tile, n_tile);
  grouped_gemm::TileWork work;
  if (!grouped_gemm::find_tile<BM>(args.expert_offsets, static_cast<int>(args.num_experts), m_tile,
                                   work)) {
    return;
  }

  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid & 31, warp = tid >> 5;
  const int warp_m = warp / Tile::kWarpsN, warp_n = warp % Tile::kWarpsN;
  const int n = static_cast<int>(args.n), k = static_cast<int>(args.k);
  const int64_t b_rows_per_expert = Gated ? 2 * args.n : args.n;
  const int rows_here = work.row_end - work.row_begin;
  const int n0 = n_tile * BN;
  const uint8_t* a = args.a + static_cast<int64_t>(work.row_begin) * k;
  const uint8_t* b = args.b + work.expert * b_rows_per_expert * k;
  const uint32_t smem_base = grouped_gemm::smem_u32(smem);

  // Scales: each stage carries, after all the stages' tiles, the K block's scale of every weight
  // row of the tile (b_rows) and then of every row (BM), copied by 4-byte cp.async with the tiles,
  // so no thread holds scales in registers across the MMAs. Entry i of a stage is copied by thread
  // i % kThreads from scale_src[i / kThreads] (+ the block index). Rows and columns past the
  // problem take a valid neighbour's scale: their partial sums are zero (zero-filled tiles) and
  // they are never stored.
  const int k_blocks = (k + BK - 1) / BK;
  const int64_t block_n = args.b_scales.block_n, block_k = args.b_scales.block_k;
  // Activation scale columns: k_blocks, or 1 per token (then every block reads column 0).
  const int a_cols = static_cast<int>(fp8_act_scale_cols(k, args.a_per_token));
  constexpr int kBRows = Tile::template b_rows<Gated>();
  constexpr int kScaleEntries = kBRows + BM;
  constexpr int kScaleIters = (kScaleEntries + kThreads - 1) / kThreads;
  const float* scale_src[kScaleIters];
#pragma unroll
  for (int it = 0; it < kScaleIters; ++it) {
    const int i = tid + it * kThreads;
    if (i < kBRows) {
      const int64_t s_rows = (b_rows_per_expert + block_n - 1) / block_n;
      const int64_t s_cols = (args.k + block_k - 1) / block_k;
      const bool up = Gated && i >= BN;
      const int col = min(n0 + (up ? i - BN : i), n - 1);
      scale_src[it] =
          args.b_scales.scales + (work.expert * s_rows + (up ? n + col : col) / block_n) * s_cols;
    } else {
      const int row = min(i - kBRows, rows_here - 1);
      scale_src[it] = args.a_scales + static_cast<int64_t>(work.row_begin + row) * a_cols;
    }
  }
  const uint32_t scale_base = smem_base + kStages * kStageBytes;
  const float* scale_smem = reinterpret_cast<const float*>(smem + kStages * kStageBytes);

  auto load = [&](int stage, int k_tile) {
    const uint32_t s_a = smem_base + stage * kStageBytes;
    load_stage<BM, BN, kThreads, Gated>(s_a, s_a + kABytes, a, b, rows_here, n0, n, k, k_tile * BK,
                                        tid);
    const int w_index = static_cast<int>(static_cast<int64_t>(k_tile) * BK / block_k);
    const int a_index = a_cols == 1 ? 0 : k_tile;
#pragma unroll
    for (int it = 0; it < kScaleIters; ++it) {
      const int i = tid + it * kThreads;
      if (kScaleEntries % kThreads != 0 && i >= kScaleEntries) break;
      asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(
                       scale_base + (stage * kScaleEntries + i) * 4),
                   "l"(scale_src[it] + (i < kBRows ? w_index : a_index)));
    }
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

#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < k_blocks) load(s, s);
    grouped_gemm::cp_async_commit();
  }

  // ldmatrix lanes: A x4 = rows 0-15 at chunks (2kk, 2kk+1); B x4 = two n8 blocks × two k halves.
  const int a_row = warp_m * Tile::WM + (lane & 15);
  const int a_chunk = lane >> 4;
  const int b_row = warp_n * Tile::WN + (lane & 7) + ((lane >> 4) << 3);
  const int b_chunk = (lane >> 3) & 1;

  for (int kb = 0; kb < k_blocks; ++kb) {
    // Block kb has landed for this thread; the barrier makes it visible to all and also says every
    // warp is done with the stage the next load overwrites (read in iteration kb - 1).
    grouped_gemm::cp_async_wait<kStages - 2>();
    __syncthreads();
    const int next = kb + kStages - 1;
    if (next < k_blocks) load(next % kStages, next);
    grouped_gemm::cp_async_commit();

    float part[MI][NI][4];
    float part_up[Gated ? MI : 1][Gated ? NI : 1][4];
#pragma unroll
    for (int mi = 0; mi < MI; ++mi) {
#pragma unroll
      for (int ni = 0; ni < NI; ++ni) {
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          part[mi][ni][q] = 0.0f;
          if constexpr (Gated) part_up[mi][ni][q] = 0.0f;
        }
      }
    }

    const uint32_t s_a = smem_base + (kb % kStages) * kStageBytes;
    const uint32_t s_b = s_a + kABytes;
#pragma unroll
    for (int kk = 0; kk < BK / 32; ++kk) {
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
          mma_e4m3_16832(part[mi][ni], af[mi], bf[ni]);
          if constexpr (Gated) mma_e4m3_16832(part_up[mi][ni], af[mi], bu[ni]);
        }
      }
    }

    // Promotion: lane (g, t) holds rows g, g + 8 and columns 2t, 2t + 1 of each 16 × 8 block.
    const float* ws = scale_smem + (kb % kStages) * kScaleEntries;
    const float* xs = ws + kBRows;
#pragma unroll
    for (int mi = 0; mi < MI; ++mi) {
      const int row = warp_m * Tile::WM + mi * 16 + (lane >> 2);
      const float x_scale[2] = {xs[row], xs[row + 8]};
#pragma unroll
      for (int ni = 0; ni < NI; ++ni) {
        const int col = warp_n * Tile::WN + ni * 8 + (lane & 3) * 2;
        const float2 w = *reinterpret_cast<const float2*>(ws + col);
        float2 wu = w;
        if constexpr (Gated) wu = *reinterpret_cast<const float2*>(ws + BN + col);
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          const float xq = x_scale[q >> 1];
          acc[mi][ni][q] = fmaf(part[mi][ni][q], xq * ((q & 1) ? w.y : w.x), acc[mi][ni][q]);
          if constexpr (Gated) {
            acc_up[mi][ni][q] =
                fmaf(part_up[mi][ni][q], xq * ((q & 1) ? wu.y : wu.x), acc_up[mi][ni][q]);
          }
        }
      }
    }
  }
  grouped_gemm::cp_async_wait<0>();

  const float* bias = args.bias == nullptr ? nullptr : args.bias + work.expert * b_rows_per_expert;
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
        const float up0 = Gated ? acc_up[kUp * mi][kUp * ni][half * 2] : 0.0f;
        const float up1 = Gated ? acc_up[kUp * mi][kUp * ni][half * 2 + 1] : 0.0f;
        const float v0 = epilogue_value<Gated>(args, bias, col, acc[mi][ni][half * 2], up0);
        if (pair_stores) {
          const float v1 =
              epilogue_value<Gated>(args, bias, col + 1, acc[mi][ni][half * 2 + 1], up1);
          grouped_gemm::store_pair(c_row + col, v0, v1);
        } else {
          c_row[col] = from_float<T>(v0);
          if (col + 1 < n) {
            c_row[col + 1] = from_float<T>(
                epilogue_value<Gated>(args, bias, col + 1, acc[mi][ni][half * 2 + 1], up1));
          }
        }
      }
    }
  }
}

// An upper bound of the m tiles: every expert's last tile may be partial, and at most
// min(E, rows) experts have rows.
inline int64_t m_tiles_bound(const Fp8GemmArgs& args, int bm) {
  return (args.max_rows + bm - 1) / bm + std::min(args.num_experts, args.max_rows);
}

template <typename T, class Tile, bool Gated>
void launch_tile(const Fp8GemmArgs& args, cudaStream_t stream) {
  const int64_t m_bound = m_tiles_bound(args, Tile::BM);
  const int64_t n_tiles = (args.n + Tile::BN - 1) / Tile::BN;
  const int64_t blocks = m_bound * n_tiles;
  MG_CHECK(blocks <= INT32_MAX, "FP8 grouped GEMM: {} tiles exceed the grid", blocks);
  constexpr int kSmem = Tile::template smem_bytes<Gated>();
  auto* kernel = fp8_gemm_mma_kernel<T, Tile, Gated>;
  // Above 48 KB a kernel must opt in; a host-side attribute, not a stream operation.
  MG_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  kernel<<<static_cast<unsigned>(blocks), Tile::kThreads, kSmem, stream>>>(
      args, static_cast<int>(m_bound), static_cast<int>(n_tiles));
  MG_CUDA_CHECK_LAUNCH();
}

template <typename T, bool Gated>
void launch_gemm(const Fp8GemmArgs& args, Fp8GemmKernel kernel, cudaStream_t stream) {
  switch (kernel) {
    case Fp8GemmKernel::kMma16:
      return launch_tile<T, Fp8Mma16Tile, Gated>(args, stream);
    case Fp8GemmKernel::kMma64:
      if constexpr (Gated) {
        return launch_tile<T, Fp8Mma64GatedTile, true>(args, stream);
      } else {
        return launch_tile<T, Fp8Mma64PlainTile, false>(args, stream);
      }
    case Fp8GemmKernel::kWgmma:
      return launch_wgmma<T, Gated>(args, stream);
    case Fp8GemmKernel::kTma:
    case Fp8GemmKernel::kTma64:
      return launch_tma<T, Gated>(args, kernel, stream);
  }
  MG_FAIL("FP8 grouped GEMM: unknown kernel {}", static_cast<int>(kernel));
}

}  // namespace mg::cuda::fp8
