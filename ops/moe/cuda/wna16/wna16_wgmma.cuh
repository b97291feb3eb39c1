// The WNA16 grouped GEMM on wgmma (sm_90a; BF16 / F16 activations, INT4 codes with integer zero
// points): the packed weights are the A operand, converted in the consumers' registers; the
// activation rows are the B operand, in shared memory from TMA ("swap AB": the tile computes
// outᵀ[features × tokens]).
//
// Why this shape: wgmma reads B only from shared memory, but A may come from registers, and an
// A fragment (16 rows × 16 k a warp) is exactly two of the layout's B fragments (the 8-row blocks
// of wna16_experts_cuda.h, section 1: rows g and g + 8 of the warp's 16). So a lane turns its own
// packed words into its own A registers, as the mma.sync kernels do with B, and the converted
// weights never go back to shared memory (the fused TMA kernel of docs/performance.md, whose
// three converter warps wrote them there, was bound by those warps). Tokens are wgmma's N, which
// may be as small as the experts' rows need; features are the M of two m64 wgmmas a consumer
// warpgroup.
//
// One CTA per SM (grid = min(#SMs, tiles)), 384 threads in three warpgroups, the persistent TMA
// kernel's structure (grouped_gemm_tma.cuh: its barriers, tile hand-off and dynamic scheduler):
//   warpgroup 0    producer: warp 0 loads, per 128-wide K step of a tile, the tile's packed words
//                  (32 blocks of 8 rows: two TMA boxes of 16) and its token rows (boxes of 16
//                  rows × 64 k, 128-byte swizzled, only as many as the tile has rows);
//   warpgroups 1-2 consumers: each computes 128 weight rows (plain: features [128 w, 128 w + 128)
//                  of the tile, as two m64 wgmmas; gated: features [64 w, 64 w + 64) as the gate
//                  m64 and the up m64, so a lane holds gate and up of the same outputs) × 64
//                  tokens.
// Tile: 64 tokens × 256 weight rows (plain: 256 features; gated: 128 gate + 128 up rows, 128
// outputs), K step 128 (the packed layout's), 4 stages of 16 KB words + 16 KB activations.
//
// The values (the exact integer path of wna16_exact_codes.h, as the mma16 / mma32 tiles): every
// zero point is an integer code (Wna16Zeros::kIntegerCodes), so a weight's q - z is exact in T;
// each scale group sums x · (q - z) in fp32 accumulators of its own (wgmma with scale-d off at the
// group's first k16 step), and the group's end adds s · sum to the tile's accumulators. No weight
// is rounded to T. Per pair of codes (one byte of a word: k and k + 1 of the lane's fragment), one
// PRMT puts the byte's low nibble at bits 0..3 of the low half and its high nibble at bits 3..6 of
// the high half (from the word and the word shifted right by one), one LOP3 masks them under T's
// magic M (2^7 BF16, 2^10 F16: the halves are M + lo and M + 8 hi exactly), and one HFMA2 with
// (1, 1/8) and -(M + z, M/8 + z) gives (lo - z, hi - z) exactly (small integers: no rounding).
//
// Bounds: TMA fills zeros past K (both operands: the packed K is padded with code 0 and its
// activations are zero) and past the last packed block; rows past an expert's last row are stale
// shared memory or the next expert's rows: computed, never stored; features past N are computed
// from whatever rows the boxes hold, never stored, and their group pairs are read at row N - 1.
// The activation map spans max_rows rows: `a` must be the permuted rows (no gather here).
//
// The sm_90 (non-a) compile keeps an empty body; the host launches it only when the loaded
// kernel is the sm_90a one (wgmma_kernel_available). Measured: docs/performance.md, "The packed
// weights as wgmma's register operand".
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <string>
#include <type_traits>

#include "framework/core/error.h"
#include "framework/device/cuda/cuda_check.h"
#include "ops/moe/cuda/grouped_gemm_tma.cuh"
#include "ops/moe/cuda/moe_activation_cuda.cuh"
#include "ops/moe/cuda/wna16/wna16_exact_codes.h"
#include "ops/moe/cuda/wna16/wna16_experts_cuda.h"

namespace mg::cuda::wna16 {

struct WgmmaTile {
  static constexpr int BT = 64;       // tokens a tile: the wgmma N
  static constexpr int kWgmmas = 2;   // m64 wgmmas a consumer warpgroup (128 weight rows)
  static constexpr int kBlocks = 32;  // packed 8-row blocks a tile (256 weight rows)
  static constexpr int kBoxBlocks = 16;
  static constexpr int kABoxRows = 16;
  static constexpr int kStages = 4;
  static constexpr int kWordsBytes = kBlocks * 512;  // one K step of the tile's packed rows
  static constexpr int kAHalfBytes = BT * 128;       // [64 tokens][64 k] T, 128-byte swizzled
  static constexpr int kABoxBytes = kABoxRows * 128;
  static constexpr int kStageBytes = kWordsBytes + 2 * kAHalfBytes;
  static constexpr int kThreads = 384;
  static constexpr int kConsumerWarps = 8;
  static constexpr int kSlots = 4;
  static constexpr int kProducerRegs = 40, kConsumerRegs = 232;
  static constexpr int kBarrierOffset = kStages * kStageBytes;
  static constexpr int kSmemBytes =
      1024 + kBarrierOffset + (2 * kStages + 2 * kSlots) * 8 + kSlots * 4;
};
static_assert(WgmmaTile::kSmemBytes <= 227 * 1024, "shared memory over the sm_90 limit");
static_assert(128 * WgmmaTile::kProducerRegs + 256 * WgmmaTile::kConsumerRegs <=
                  WgmmaTile::kThreads * 168,
              "setmaxnreg counts exceed the CTA's registers");

// "" when the kernel takes this GEMM (permuted rows, and what wna16_wgmma_check asks of the
// weights), else the reason.
inline std::string wgmma_gemm_check(const Wna16GemmArgs& args) {
  if (args.row_to_pair != nullptr) return "it reads permuted rows (TMA): gather them first";
  return wna16_wgmma_check(args.b, args.k, args.max_rows, args.num_experts);
}

#ifdef MG_GROUPED_GEMM_WGMMA

__device__ __forceinline__ void tma_load_3d(uint32_t dst, const CUtensorMap& map, uint32_t bar,
                                            int c0, int c1, int c2) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4, %5}], [%2];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(&map)), "r"(bar), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
}

// D[64 × 64] (+)= A[64 × 16] (registers) · B[64 × 16]ᵀ (K-major in shared memory); D = A · Bᵀ
// when accumulate is 0.
template <typename T>
__device__ __forceinline__ void wgmma_m64n64k16_rs(float (&d)[32], const uint32_t (&a)[4],
                                                   uint64_t desc_b, int accumulate) {
#define MG_WNA16_WGMMA_RS(TYPE)                                                                    \
  asm volatile(                                                                                    \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"                                                 \
      "wgmma.mma_async.sync.aligned.m64n64k16.f32." TYPE "." TYPE                                  \
      " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, "    \
      "%19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "                         \
      "{%32, %33, %34, %35}, %36, p, 1, 1, 0;\n}\n"                                                \
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),        \
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),    \
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), \
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), \
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])                                         \
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(accumulate))
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    MG_WNA16_WGMMA_RS("bf16");
  } else {
    MG_WNA16_WGMMA_RS("f16");
  }
#undef MG_WNA16_WGMMA_RS
}

// Ties registers to the point of the call, so the compiler neither reads accumulators before a
// wgmma wait nor reuses a fragment's registers while a wgmma may still read them.
template <int N>
__device__ __forceinline__ void fence_regs(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
template <int W>
__device__ __forceinline__ void fence_regs(uint32_t (&a)[W][4]) {
#pragma unroll
  for (int i = 0; i < W; ++i) {
#pragma unroll
    for (int r = 0; r < 4; ++r) asm volatile("" : "+r"(a[i][r])::"memory");
  }
}
__device__ __forceinline__ void prefetch_l1(const void* p) {
  asm volatile("prefetch.global.L1 [%0];\n" ::"l"(p));
}
template <int N>
__device__ __forceinline__ void wgmma_wait_group() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

// The pair (x0 * m0 + c0, x1 * m1 + c1) of T, one rounding each.
template <typename T>
__device__ __forceinline__ uint32_t fma2(uint32_t x, uint32_t m, uint32_t c) {
  uint32_t d;
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(x), "r"(m), "r"(c));
  } else {
    asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(x), "r"(m), "r"(c));
  }
  return d;
}

template <typename T>
inline constexpr bool kIsBf16 = std::is_same_v<T, __nv_bfloat16>;
// (1, 1/8) as a T pair (low, high).
template <typename T>
inline constexpr uint32_t kPairScale = kIsBf16<T> ? 0x3E003F80u : 0x30003C00u;

// The addend pair -(M + z, M / 8 + z) of zero code z (M = 128 BF16, 1024 F16): exact in T.
template <typename T>
__device__ __forceinline__ uint32_t zero_addend(int z) {
  constexpr float kM = kIsBf16<T> ? 128.0f : 1024.0f;
  const float lo = -(kM + static_cast<float>(z)), hi = -(kM / 8.0f + static_cast<float>(z));
  return grouped_gemm::pack_pair<T>(lo, hi);
}

// Byte m of `word` (codes lo, hi: k and k + 1 of the fragment) as the exact pair (lo - z, hi - z);
// `shifted` is word >> 1.
template <typename T>
__device__ __forceinline__ uint32_t code_pair(uint32_t word, uint32_t shifted, int m,
                                              uint32_t addend) {
  constexpr uint32_t kMagic = wna16_exact::kMagicHalf<kIsBf16<T>> * 0x00010001u;
  const uint32_t sel = static_cast<uint32_t>(m) | (static_cast<uint32_t>(4 + m) << 8);
  const uint32_t placed = __byte_perm(word, shifted, sel);
  return fma2<T>(wna16_exact::and_or(placed, 0x0078000Fu, kMagic), kPairScale<T>, addend);
}

#endif  // MG_GROUPED_GEMM_WGMMA

template <typename T, bool Gated>
__global__ void __launch_bounds__(WgmmaTile::kThreads, 1)
    wna16_wgmma_kernel(const __grid_constant__ CUtensorMap map_w,
                       const __grid_constant__ CUtensorMap map_a, const Wna16GemmArgs args,
                       int n_tiles, unsigned counter_slot) {
#ifdef MG_GROUPED_GEMM_WGMMA
  using namespace grouped_gemm;
  using Tile = WgmmaTile;
  constexpr int BT = Tile::BT;
  constexpr int kStages = Tile::kStages, kSlots = Tile::kSlots, kW = Tile::kWgmmas;
  constexpr int kStageBytes = Tile::kStageBytes, kWordsBytes = Tile::kWordsBytes;
  constexpr int kAHalfBytes = Tile::kAHalfBytes, kABoxBytes = Tile::kABoxBytes;
  constexpr int kAcc = BT / 2;  // accumulators of one m64 wgmma a thread
  // Features a tile: its 256 weight rows, halved when gated (gate and up rows).
  constexpr int kOutputs = Gated ? 128 : 256;
  extern __shared__ uint8_t smem_raw[];
  const uint32_t smem_base = (smem_u32(smem_raw) + 1023u) & ~1023u;
  const uint32_t full_bar = smem_base + Tile::kBarrierOffset;  // [kStages]
  const uint32_t empty_bar = full_bar + kStages * 8;           // [kStages]
  const uint32_t slot_full_bar = empty_bar + kStages * 8;      // [kSlots]
  const uint32_t slot_empty_bar = slot_full_bar + kSlots * 8;  // [kSlots]
  const uint32_t tile_slots = slot_empty_bar + kSlots * 8;     // [kSlots] int
  const TileHandoff handoff{slot_full_bar, slot_empty_bar, tile_slots};

  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid & 31, warp = tid >> 5, warpgroup = warp >> 2;
  init_tma_barriers<kStages, kSlots>(full_bar, empty_bar, 1, handoff, Tile::kConsumerWarps);
  __syncthreads();

  const int num_experts = static_cast<int>(args.num_experts);
  const int m_tiles = count_m_tiles<BT>(args.expert_offsets, num_experts);
  const int num_tiles = m_tiles * n_tiles;
  const int K = static_cast<int>(args.k), N = static_cast<int>(args.n);
  const int k_tiles = static_cast<int>(args.b.k_steps);
  const int part_rows = static_cast<int>(args.b.part_rows);

  if (warpgroup == 0) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(Tile::kProducerRegs));
    if (warp != 0) return;
    if (lane == 0) {
      asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(&map_w))
                   : "memory");
      asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(&map_a))
                   : "memory");
    }
    uint32_t it = 0;
    const auto produce = [&](int tile) {
      int n_tile;
      const TileWork work = persistent_tile_work<BT>(args.expert_offsets, num_experts, tile,
                                                     m_tiles, n_tiles, n_tile);
      if (lane == 0) {
        // The token rows in boxes of 16, as many as the tile has rows.
        const int boxes = (work.row_end - work.row_begin + Tile::kABoxRows - 1) / Tile::kABoxRows;
        const uint32_t bytes = kWordsBytes + 2 * boxes * kABoxBytes;
        // The tile's two boxes of words: plain, features n0 .. of the expert's one part; gated,
        // the gate rows n0 .., then the same up rows.
        const int n0 = n_tile * kOutputs;
        const int expert_block = work.expert * static_cast<int>(args.b.parts) * part_rows / 8;
        const int block0 = expert_block + n0 / 8;
        const int block1 = Gated ? block0 + part_rows / 8 : block0 + Tile::kBoxBlocks;
        for (int kt = 0; kt < k_tiles; ++kt, ++it) {
          const uint32_t stage = it % kStages;
          mbar_wait(empty_bar + stage * 8, ((it / kStages) & 1) ^ 1);
          const uint32_t full = full_bar + stage * 8;
          mbar_arrive_expect_tx(full, bytes);
          const uint32_t s_w = smem_base + stage * kStageBytes;
          const uint32_t s_a = s_w + kWordsBytes;
          tma_load_3d(s_w, map_w, full, 0, kt, block0);
          tma_load_3d(s_w + kWordsBytes / 2, map_w, full, 0, kt, block1);
          for (int half = 0; half < 2; ++half) {
            for (int box = 0; box < boxes; ++box) {
              tma_load_2d(s_a + half * kAHalfBytes + box * kABoxBytes, map_a, full,
                          kt * 128 + half * 64, work.row_begin + box * Tile::kABoxRows);
            }
          }
        }
      }
      __syncwarp();
    };
    produce_tiles<kSlots>(g_tile_counters[counter_slot], num_tiles, handoff, produce);
  } else {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(Tile::kConsumerRegs));
    const int w = warpgroup - 1, j = warp & 3, g = lane >> 2, t = lane & 3;
    // The words block of wgmma i of this warp (rows g; the next block holds rows g + 8), the
    // weight part it reads (gated: 0 gate, 1 up) and its first feature in the tile: plain rows
    // 128 w + 64 i + 16 j; gated the gate (i = 0) and up (i = 1) rows of features 64 w + 16 j,
    // so a lane holds gate and up of the same outputs.
    const auto block_of = [&](int i) {
      return Gated ? 16 * i + 8 * w + 2 * j : 16 * w + 8 * i + 2 * j;
    };
    const auto part_of = [&](int i) { return Gated ? i : 0; };
    const auto first_feature = [&](int i) {
      return Gated ? 64 * w + 16 * j : 128 * w + 64 * i + 16 * j;
    };
    const int groups = static_cast<int>(args.b.groups);
    // k16 steps a scale group (channel-wise: every step of K, the last ends the group anyway).
    const int group_steps = groups > 1 ? static_cast<int>(args.b.group_size) / 16 : INT32_MAX;
    const int64_t rows_per_expert = args.b.parts * args.b.part_rows;
    uint32_t it = 0;
    const auto consume = [&](int tile) {
      int n_tile;
      const TileWork work = persistent_tile_work<BT>(args.expert_offsets, num_experts, tile,
                                                     m_tiles, n_tiles, n_tile);
      // Feature (output column) of wgmma i, row g (+ 8 hf) of the warp's 16.
      const auto feature = [&](int i, int hf) {
        return n_tile * kOutputs + first_feature(i) + g + 8 * hf;
      };
      // Its group pairs {s, -z·s} (group 0), the rows past N read at row N - 1.
      const float2* pairs0 =
          reinterpret_cast<const float2*>(args.b.params) + work.expert * rows_per_expert * groups;
      const auto pairs = [&](int i, int hf) {
        return pairs0 + (part_of(i) * part_rows + min(feature(i, hf), N - 1)) * groups;
      };
      float acc[kW][kAcc], sum[kW][kAcc];
#pragma unroll
      for (int i = 0; i < kW; ++i) {
#pragma unroll
        for (int r = 0; r < kAcc; ++r) acc[i][r] = 0.0f, sum[i][r] = 0.0f;
      }
      // The group pairs are asked of L1 a group ahead (no registers held for them).
#pragma unroll
      for (int i = 0; i < kW; ++i) {
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) prefetch_l1(pairs(i, hf));
      }
      float scale[kW][2];
      uint32_t addend[kW][2];
      int group = 0, group_step = 0;  // the group, and the k16 step within it
      uint32_t frag[2][kW][4];        // [buffer][wgmma][register]: two k16 steps in flight at most
      for (int kt = 0; kt < k_tiles; ++kt, ++it) {
        const uint32_t stage = it % kStages;
        mbar_wait(full_bar + stage * 8, (it / kStages) & 1);
        const uint32_t s_w = smem_base + stage * kStageBytes;
        const uint32_t s_a = s_w + kWordsBytes;
        uint32_t words[kW][2];  // [wgmma][row half]: the lane's word of the K unit (32 wide)
#pragma unroll
        for (int kk = 0; kk < 8; ++kk) {
          const int k = kt * 128 + kk * 16;
          if (k < K) {
            const bool first = group_step == 0;
            if (first) {
#pragma unroll
              for (int i = 0; i < kW; ++i) {
#pragma unroll
                for (int hf = 0; hf < 2; ++hf) {
                  const float2 pair = __ldg(pairs(i, hf) + group);
                  scale[i][hf] = pair.x;
                  addend[i][hf] = zero_addend<T>(wna16_exact::zero_code(pair.x, pair.y));
                  if (group + 1 < groups) prefetch_l1(pairs(i, hf) + group + 1);
                }
              }
            }
            uint32_t(&a)[kW][4] = frag[kk & 1];
            const int u = kk >> 1, h = kk & 1;
            if (h == 0) {  // word u of each block serves k16 steps 2u and 2u + 1
#pragma unroll
              for (int i = 0; i < kW; ++i) {
#pragma unroll
                for (int hf = 0; hf < 2; ++hf) {
                  words[i][hf] = ld_shared_u32(s_w + (block_of(i) + hf) * 512 + lane * 16 + u * 4);
                }
              }
            }
#pragma unroll
            for (int i = 0; i < kW; ++i) {
#pragma unroll
              for (int hf = 0; hf < 2; ++hf) {
                const uint32_t shifted = words[i][hf] >> 1;
                a[i][hf] = code_pair<T>(words[i][hf], shifted, 2 * h, addend[i][hf]);
                a[i][hf + 2] = code_pair<T>(words[i][hf], shifted, 2 * h + 1, addend[i][hf]);
              }
            }
            asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
            const uint64_t desc = wgmma_desc(s_a + (kk >> 2) * kAHalfBytes + (kk & 3) * 32);
#pragma unroll
            for (int i = 0; i < kW; ++i) wgmma_m64n64k16_rs<T>(sum[i], a[i], desc, first ? 0 : 1);
            asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
            const bool last = group_step == group_steps - 1 || k + 16 >= K;
            group_step = last ? 0 : group_step + 1;
            if (last) {
              wgmma_wait_group<0>();
#pragma unroll
              for (int i = 0; i < kW; ++i) fence_regs(sum[i]);
              fence_regs(a);
#pragma unroll
              for (int i = 0; i < kW; ++i) {
#pragma unroll
                for (int r = 0; r < kAcc; ++r) acc[i][r] += scale[i][(r >> 1) & 1] * sum[i][r];
              }
              ++group;
            } else {
              wgmma_wait_group<1>();
              fence_regs(frag[(kk + 1) & 1]);
            }
          }
        }
        // Every wgmma of this stage has completed (a group ends at every stage's end, or the
        // last one waits here): free the stage.
        wgmma_wait_group<0>();
#pragma unroll
        for (int i = 0; i < kW; ++i) fence_regs(sum[i]);
        if (lane == 0) mbar_arrive(empty_bar + stage * 8);
        __syncwarp();
      }

      // Epilogue: lane (g, t) holds feature(i, hf) and tokens 8 q + 2 t (+1) in
      // acc[i][4 q + 2 hf ..].
      const int rows_here = work.row_end - work.row_begin;
      const int64_t bias_rows = Gated ? 2 * args.n : args.n;
      const float* bias = args.bias == nullptr ? nullptr : args.bias + work.expert * bias_rows;
      T* c = static_cast<T*>(args.c) + static_cast<int64_t>(work.row_begin) * N;
      constexpr int kOuts = Gated ? 1 : kW;
#pragma unroll
      for (int i = 0; i < kOuts; ++i) {
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
          const int f = feature(i, hf);
          if (f >= N) continue;
          float b_gate = 0.0f, b_up = 0.0f;
          if (bias != nullptr) {
            b_gate = bias[f];
            if constexpr (Gated) b_up = bias[N + f];
          }
#pragma unroll
          for (int q = 0; q < BT / 8; ++q) {
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const int row = 8 * q + 2 * t + e;
              if (row >= rows_here) continue;
              const int r = 4 * q + 2 * hf + e;
              float v = acc[i][r] + b_gate;
              if constexpr (Gated) {
                v = moe_activation(args.act, v, acc[1][r] + b_up);  // the up rows' sum
              } else if (args.epilogue == GroupedEpilogue::kActivation) {
                v = moe_activation(args.act, v, 0.0f);
              }
              c[static_cast<int64_t>(row) * N + f] = from_float<T>(v);
            }
          }
        }
      }
    };
    consume_tiles<kSlots>(num_tiles, handoff, consume);
  }
#endif  // MG_GROUPED_GEMM_WGMMA
}

// ---------------------------------------------------------------------------------------------
// Host side.

// The packed words [E · parts · part_rows / 8 blocks][k_steps][128 words] (no swizzle): boxes of
// box_blocks blocks × one K step, zeros past the last block.
inline CUtensorMap wgmma_map_words(const Wna16Weights& b, int64_t num_experts, int box_blocks) {
  const cuuint64_t blocks = static_cast<cuuint64_t>(num_experts * b.parts * b.part_rows / 8);
  const cuuint64_t k_steps = static_cast<cuuint64_t>(b.k_steps);
  const cuuint64_t dims[3] = {128, k_steps, blocks};
  const cuuint64_t strides[2] = {512, k_steps * 512};
  const cuuint32_t box[3] = {128, 1, static_cast<cuuint32_t>(box_blocks)};
  const cuuint32_t element_strides[3] = {1, 1, 1};
  CUtensorMap map;
  const CUresult result = grouped_gemm::tensor_map_encoder()(
      &map, CU_TENSOR_MAP_DATA_TYPE_UINT32, 3, const_cast<uint32_t*>(b.words), dims, strides, box,
      element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
      CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  MG_CHECK(result == CUDA_SUCCESS, "WNA16 wgmma GEMM: cuTensorMapEncodeTiled (words) failed ({})",
           static_cast<int>(result));
  return map;
}

// The permuted activation rows [max_rows][K] T: boxes of 16 rows × 64 k, 128-byte swizzle.
template <typename T>
CUtensorMap wgmma_map_a(const Wna16GemmArgs& args) {
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(args.k),
                              static_cast<cuuint64_t>(args.max_rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(args.k) * sizeof(T)};
  const cuuint32_t box[2] = {64, WgmmaTile::kABoxRows};
  return grouped_gemm::encode_tensor_map<T>(args.a, 2, dims, strides, box);
}

// True when the loaded cubin holds the sm_90a kernel: its body needs >= 128 registers (the
// accumulators alone), the empty sm_90 stand-in a handful (as grouped GEMMs' wgmma_available).
template <typename T>
bool wgmma_kernel_available() {
  static const bool available = [] {
    cudaFuncAttributes attr{};
    if (cudaFuncGetAttributes(&attr, wna16_wgmma_kernel<T, false>) != cudaSuccess) {
      (void)cudaGetLastError();
      return false;
    }
    return attr.numRegs >= 128;
  }();
  return available;
}

template <typename T, bool Gated>
void launch_wgmma_gemm_tile(const Wna16GemmArgs& args, cudaStream_t stream) {
  constexpr int BT = WgmmaTile::BT, kOutputs = Gated ? 128 : 256;
  // An upper bound of the m tiles: every expert's last tile may be partial.
  const int64_t m_bound = (args.max_rows + BT - 1) / BT + std::min(args.num_experts, args.max_rows);
  const int64_t n_tiles = (args.n + kOutputs - 1) / kOutputs;
  const int64_t tiles = m_bound * n_tiles;
  MG_CHECK(tiles <= INT32_MAX, "WNA16 wgmma GEMM: {} tiles exceed 32-bit tile indices", tiles);
  int device = 0, sms = 0;
  MG_CUDA_CHECK(cudaGetDevice(&device));
  MG_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  const CUtensorMap map_w = wgmma_map_words(args.b, args.num_experts, WgmmaTile::kBoxBlocks);
  const CUtensorMap map_a = wgmma_map_a<T>(args);
  auto* kernel = wna16_wgmma_kernel<T, Gated>;
  MG_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     WgmmaTile::kSmemBytes));
  const int64_t blocks = std::min<int64_t>(sms, tiles);
  kernel<<<static_cast<unsigned>(blocks), WgmmaTile::kThreads, WgmmaTile::kSmemBytes, stream>>>(
      map_w, map_a, args, static_cast<int>(n_tiles), grouped_gemm::tile_counter_slot());
  MG_CUDA_CHECK_LAUNCH();
}

template <typename T>
void launch_wgmma_gemm(const Wna16GemmArgs& args, bool gated, cudaStream_t stream) {
  MG_CHECK(wgmma_kernel_available<T>(),
           "WNA16 grouped GEMM: wna16_wgmma needs the sm_90a kernels, which this GPU or build "
           "lacks");
  const std::string why = wgmma_gemm_check(args);
  MG_CHECK(why.empty(), "WNA16 grouped GEMM: wna16_wgmma refuses: {}", why);
  if (gated) return launch_wgmma_gemm_tile<T, true>(args, stream);
  launch_wgmma_gemm_tile<T, false>(args, stream);
}

}  // namespace mg::cuda::wna16
