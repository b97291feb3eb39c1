// Pieces shared by the grouped GEMM kernels (grouped_gemm_cuda.cuh): the tile → expert lookup,
// the epilogue, and the cp.async / ldmatrix / mma.sync wrappers.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "framework/device/cuda/cuda_utils.cuh"
#include "ops/moe/cuda/grouped_gemm_cuda.h"
#include "ops/moe/cuda/moe_activation_cuda.cuh"

namespace mg::cuda {
namespace grouped_gemm {

// m tiles per tile group of the launch order (see the file comment).
inline constexpr int kGroupM = 8;

// The rows one CTA computes: expert `expert`, rows [row_begin, row_end) (at most BM).
struct TileWork {
  int expert;
  int row_begin;
  int row_end;
};

// Maps the launch index to (m tile, n tile) in the grouped order.
__device__ __forceinline__ void tile_coords(int m_tiles_bound, int n_tiles, int& m_tile,
                                            int& n_tile) {
  const int pid = static_cast<int>(blockIdx.x);
  const int group_tiles = kGroupM * n_tiles;
  const int first_m = (pid / group_tiles) * kGroupM;
  const int group_m = min(m_tiles_bound - first_m, kGroupM);
  const int in_group = pid % group_tiles;
  m_tile = first_m + in_group % group_m;
  n_tile = in_group / group_m;
}

// Finds the expert and rows of global m tile `m_tile`, where expert e owns ceil(rows_e / BM)
// consecutive m tiles. Every warp computes it on its own (the offsets are L1 hits after the first
// warp), so no block barrier is needed; lane l sums the tiles of experts [l * per, (l+1) * per)
// and a warp scan finds the lane, then the expert. False when the tile is past the last one.
template <int BM>
__device__ __forceinline__ bool find_tile(const int32_t* __restrict__ offsets, int num_experts,
                                          int m_tile, TileWork& work) {
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int per = (num_experts + 31) / 32;
  const int e_begin = min(lane * per, num_experts);
  const int e_end = min(e_begin + per, num_experts);
  int tiles = 0;
#pragma unroll 4
  for (int e = e_begin; e < e_end; ++e) {
    const int rows = __ldg(offsets + e + 1) - __ldg(offsets + e);
    tiles += (max(rows, 0) + BM - 1) / BM;
  }
  int inclusive = tiles;
#pragma unroll
  for (int d = 1; d < 32; d <<= 1) {
    const int v = __shfl_up_sync(0xffffffffu, inclusive, d);
    if (lane >= d) inclusive += v;
  }
  const int exclusive = inclusive - tiles;
  const bool mine = m_tile >= exclusive && m_tile < inclusive;
  const unsigned owners = __ballot_sync(0xffffffffu, mine);
  if (owners == 0) return false;
  int expert = 0, row_begin = 0, row_end = 0;
  if (mine) {
    int first = exclusive;
    for (int e = e_begin; e < e_end; ++e) {
      const int begin = __ldg(offsets + e);
      const int end = __ldg(offsets + e + 1);
      const int expert_tiles = (max(end - begin, 0) + BM - 1) / BM;
      if (m_tile < first + expert_tiles) {
        expert = e;
        row_begin = begin + (m_tile - first) * BM;
        row_end = min(end, row_begin + BM);
        break;
      }
      first += expert_tiles;
    }
  }
  const int owner = __ffs(owners) - 1;
  work.expert = __shfl_sync(0xffffffffu, expert, owner);
  work.row_begin = __shfl_sync(0xffffffffu, row_begin, owner);
  work.row_end = __shfl_sync(0xffffffffu, row_end, owner);
  return true;
}

// c = epilogue(acc_gate, acc_up) for one output column (acc_up only read when Gated).
template <typename T, bool Gated>
__device__ __forceinline__ float epilogue_value(const GroupedGemmArgs& args, const T* bias, int col,
                                                float acc, float acc_up) {
  if (bias != nullptr) acc += to_float(bias[col]);
  if constexpr (Gated) {
    if (bias != nullptr) acc_up += to_float(bias[args.n + col]);
    return moe_activation(args.act, acc, acc_up);
  } else {
    return args.epilogue == GroupedEpilogue::kActivation ? moe_activation(args.act, acc, 0.0f)
                                                         : acc;
  }
}

// ---------------------------------------------------------------------------------------------
// Tensor-core path (BF16 / F16).

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes global → shared, bypassing L1; zero-filled when !valid (tails of K, N and rows).
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, bool valid) {
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::);
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

template <typename T>
__device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4],
                                          const uint32_t (&b)[2]) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
}

// Two adjacent outputs as one 4-byte store.
template <typename T>
__device__ __forceinline__ void store_pair(T* p, float x, float y) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    *reinterpret_cast<__nv_bfloat162*>(p) = __floats2bfloat162_rn(x, y);
  } else {
    *reinterpret_cast<__half2*>(p) = __floats2half2_rn(x, y);
  }
}

// Byte offset of element chunk `chunk` (8 elements) of row `row` in a swizzled [rows][64] tile.
__device__ __forceinline__ uint32_t swizzled(int row, int chunk) {
  return static_cast<uint32_t>(row * 128 + ((chunk ^ (row & 7)) << 4));
}

// cp.async of one pipeline stage: A rows [0, BM) × one 128-byte K slice [k0, k0 + 128 / sizeof(T))
// to s_a, the CTA's weight rows (BN, or gate BN then up BN when Gated) to s_b, both [rows][128 B]
// swizzled in 16-byte chunks (8 16-bit elements, or 16 FP8 codes with T = uint8_t). Rows, columns
// and K outside the problem are zero-filled so the MMAs need no masks; a K tail chunk is either
// fully in or out (K is a multiple of the chunk's elements).
template <typename T, int BM, int BN, int kThreads, bool Gated>
__device__ __forceinline__ void load_tile_stage(uint32_t s_a, uint32_t s_b, const T* a, const T* b,
                                                int rows_here, int n0, int n, int k, int k0,
                                                int tid) {
  constexpr int kBRows = Gated ? 2 * BN : BN;
  constexpr int kChunk = 16 / static_cast<int>(sizeof(T));  // elements per 16-byte chunk
#pragma unroll
  for (int it = 0; it < (BM * 8 + kThreads - 1) / kThreads; ++it) {
    const int i = tid + it * kThreads;
    if ((BM * 8) % kThreads != 0 && i >= BM * 8) break;
    const int row = i >> 3, chunk = i & 7;
    const int kc = k0 + chunk * kChunk;
    const bool valid = row < rows_here && kc < k;
    const T* src = valid ? a + static_cast<int64_t>(row) * k + kc : a;
    cp_async_16(s_a + swizzled(row, chunk), src, valid);
  }
#pragma unroll
  for (int it = 0; it < (kBRows * 8 + kThreads - 1) / kThreads; ++it) {
    const int i = tid + it * kThreads;
    if ((kBRows * 8) % kThreads != 0 && i >= kBRows * 8) break;
    const int row = i >> 3, chunk = i & 7;
    const bool up = Gated && row >= BN;
    const int col = n0 + (up ? row - BN : row);
    const int kc = k0 + chunk * kChunk;
    const bool valid = col < n && kc < k;
    const T* src = valid ? b + static_cast<int64_t>(up ? n + col : col) * k + kc : b;
    cp_async_16(s_b + swizzled(row, chunk), src, valid);
  }
}

}  // namespace grouped_gemm
}  // namespace mg::cuda
