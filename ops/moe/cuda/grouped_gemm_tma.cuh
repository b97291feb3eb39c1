// The TMA-fed, warp-specialised, persistent wgmma grouped GEMM (sm_90a; BF16 / F16), for the
// middle and compute-bound regimes (tens to thousands of rows per expert).
//
// One CTA per SM (grid = min(#SMs, tiles)), 384 threads in three warpgroups:
//   warpgroup 0    producer (setmaxnreg down to 40): its warp 0 takes the CTA's tiles one after
//                  the other and, per 64-wide k step, waits until a stage is free (empty
//                  barrier), then issues the TMA loads of the tile's A rows and weight rows into
//                  it; the stage's full barrier completes when all their bytes have landed. The
//                  other three warps exit.
//   warpgroups 1-2 consumers (setmaxnreg up to 232): rows [0, 64) and [64, 128) of the tile;
//                  per k step wait for the full stage, issue 4 wgmma m64n256k16 (one group left
//                  in flight), then free the stage read by the previous group; after the last k
//                  step the epilogue runs while the producer already loads the next tile.
// 128 · 40 + 256 · 232 = 64,512 of the SM's 65,536 registers (ptxas fits the consumers in the
// 168 of the launch bound: no spills).
//
// Tile: 128 rows × 256 weight rows (gated: 128 gate rows n0.. and the 128 up rows N + n0.., so
// the activation pairs gate and up in registers and 128 output columns come out; plain: 256
// output columns), k step 64, 4 stages of 48 KB. A stage holds A [128][64] (two TMA boxes of 64
// rows) and B [256][64] (one box of 256 rows, or the gate box and the up box of 128), each with
// TMA's 128-byte swizzle: the [rows][64] layout whose 16-byte chunks are XOR-swizzled by
// (row & 7), which is what the wgmma descriptors of grouped_gemm_wgmma.cuh read.
//
// Tiles: expert e owns ceil(rows_e / 128) m tiles (find_tile); tile t of the launch is
// (m tile, n tile) in groups of kGroupM m tiles × every n tile, m fastest, so tiles that run
// together share an expert's weight tile (its m tiles) and A rows (the n tiles) in L2.
// Scheduling: a CTA takes its next tile from a device counter (atomicAdd by the producer, handed
// to the consumers through shared-memory slots), so the tiles in flight stay a window of
// consecutive tiles however much the CTAs' speeds differ. A static order (CTA b takes b,
// b + grid, ...), which the first version ran, let CTAs drift apart over many tiles, and the
// ones sharing a weight tile then read it from DRAM each (up to 1.5x slower on deepseek-v3
// shapes in the kernel author's sweeps, a harness not in the repository).
// A tile with <= 64 rows loads only the first A box and its second consumer warpgroup skips the
// wgmmas (it still frees the stages), so an expert's short last tile costs half the MMA time.
//
// Epilogue (bias, activation in fp32, one rounding), masked to the expert's rows: kStaged stores
// each consumer warp's 16 rows through a private shared-memory buffer as whole 16-byte row
// pieces (store_wgmma_acc_staged; 30% faster on short-K GEMM2), else straight from the
// accumulators in 4-byte pieces (store_wgmma_acc; faster for gated GEMM1, whose 64 outputs per
// thread leave the stores less of the time).
//
// Bounds: TMA fills zeros past K, past N (the weight map is 4-D [E][gate/up][N][K]) and past
// max_rows; A rows past an expert's last row are the next expert's rows: computed, never stored.
// The A map spans max_rows rows, so `a` must hold max_rows rows (the grouped pipeline's x_perm
// and h_perm do). The driver rejects boxes larger than the tensor (tma_shape_ok).
//
// Tensor maps are encoded on the host per launch (cuTensorMapEncodeTiled, reached through the
// runtime's driver entry point so nothing links libcuda) and passed as __grid_constant__
// parameters: a captured CUDA graph keeps them, which is right because they hold only the
// launch's pointers and sizes. The sm_90 (non-a) compile keeps an empty kernel body, like the
// wgmma kernel, and the host sends work here only when wgmma_available().
#pragma once

#include <cuda.h>  // CUtensorMap and its enums (types only)
#include <cudaTypedefs.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "framework/core/error.h"
#include "framework/device/cuda/cuda_check.h"
#include "ops/moe/cuda/grouped_gemm_common.cuh"
#include "ops/moe/cuda/grouped_gemm_wgmma.cuh"

namespace mg::cuda {
namespace grouped_gemm {

struct TmaTile {
  static constexpr int BM = 128, BRows = 256, BK = 64, Stages = 4;
  static constexpr int kThreads = 384;      // producer warpgroup + 2 consumer warpgroups
  static constexpr int kConsumerWarps = 8;  // arrivals that free a stage or a tile slot
  static constexpr int kProducerRegs = 40, kConsumerRegs = 232;
  static constexpr int kAHalfBytes = 64 * BK * 2;  // one consumer warpgroup's rows: one A box
  static constexpr int kABytes = BM * BK * 2;
  static constexpr int kBBytes = BRows * BK * 2;
  static constexpr int kStageBytes = kABytes + kBBytes;
  static constexpr int kTileSlots = 4;            // tile indices handed from producer to consumers
  static constexpr int kStagingBytes = 16 * 256;  // per consumer warp: 16 rows × 128 outputs
  // Shared memory from the 1024-aligned base: the stages, the consumer warps' epilogue staging
  // (staged epilogue only), the barriers (full and empty per stage, full and empty per tile
  // slot) and the tile slots; + 1024 for aligning the base to the swizzle atom.
  static constexpr int kStagingOffset = Stages * kStageBytes;
  template <bool kStaged>
  __host__ __device__ static constexpr int barrier_offset() {
    return kStagingOffset + (kStaged ? kConsumerWarps * kStagingBytes : 0);
  }
  template <bool kStaged>
  __host__ __device__ static constexpr int smem_bytes() {
    return 1024 + barrier_offset<kStaged>() + (2 * Stages + 2 * kTileSlots) * 8 + kTileSlots * 4;
  }
};
// setmaxnreg moves registers within the CTA's allocation, which the launch bound sets at 168 a
// thread (65536 / 384 rounded down to a multiple of 8): a consumer's setmaxnreg.inc that asks for
// more than the producer's .dec gave back waits forever.
static_assert(128 * TmaTile::kProducerRegs + 256 * TmaTile::kConsumerRegs <=
                  TmaTile::kThreads * 168,
              "setmaxnreg counts exceed the CTA's registers");
static_assert(TmaTile::smem_bytes<true>() <= 227 * 1024, "shared memory over the sm_90 limit");

// The dynamic tile scheduler's device counters: [slot][0] the next tile, [1] CTAs finished.
// Each launch takes the next slot in turn (tile_counter_slot); its last CTA to finish sets the
// slot back to zero, so a later launch that takes the slot starts from zero. Launches on one
// stream are ordered; two launches running at the same time share a slot only when they were
// enqueued a multiple of kTileCounterSlots launches apart. `static`: one array per module.
inline constexpr int kTileCounterSlots = 1024;
static __device__ unsigned int g_tile_counters[kTileCounterSlots][2];

#ifdef MG_GROUPED_GEMM_WGMMA

__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
// One arrival that also adds `bytes` to the transaction count the phase waits for.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// Waits until the phase of parity `parity` has completed (a fresh barrier is in phase 0, so
// parity 1 passes at once).
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (done == 0);
}

// TMA tile loads into shared memory, completing `bytes` on barrier `bar`; coordinates innermost
// first, in elements.
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const CUtensorMap& map, uint32_t bar,
                                            int c0, int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4}], [%2];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(&map)), "r"(bar), "r"(c0), "r"(c1)
      : "memory");
}
__device__ __forceinline__ void tma_load_4d(uint32_t dst, const CUtensorMap& map, uint32_t bar,
                                            int c0, int c1, int c2, int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4, %5, %6}], [%2];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(&map)), "r"(bar), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
      : "memory");
}

__device__ __forceinline__ void st_shared_u32(uint32_t addr, uint32_t v) {
  asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(v) : "memory");
}
__device__ __forceinline__ uint32_t ld_shared_u32(uint32_t addr) {
  uint32_t v;
  asm volatile("ld.shared.b32 %0, [%1];\n" : "=r"(v) : "r"(addr) : "memory");
  return v;
}
__device__ __forceinline__ uint4 ld_shared_v4(uint32_t addr) {
  uint4 v;
  asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(addr)
               : "memory");
  return v;
}

template <typename T>
__device__ __forceinline__ uint32_t pack_pair(float x, float y) {
  uint32_t bits;
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(x, y);
    memcpy(&bits, &v, 4);
  } else {
    const __half2 v = __floats2half2_rn(x, y);
    memcpy(&bits, &v, 4);
  }
  return bits;
}

// The staged epilogue of one consumer warp: its 16 rows of the tile, 128 output columns at a
// time, go through a private [16][128] buffer in shared memory (256-byte rows, 16-byte chunks
// XOR-swizzled by row & 7: the fragment writes and the row reads are both free of bank
// conflicts), then out to c as whole rows, 16 bytes a lane (two rows of 256 contiguous bytes per
// warp store) instead of 4-byte pieces of 8 rows. warp_row0: the warp's first row in the tile.
template <typename T, bool Gated, bool HasBias, int kAct>
__device__ __forceinline__ void store_wgmma_acc_staged(const float (&acc)[128],
                                                       const GroupedGemmArgs& args,
                                                       const TileWork& work, int n0, int warp_row0,
                                                       uint32_t buf) {
  constexpr int kChunks = Gated ? 1 : 2;  // 128-column chunks of output
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int g = lane >> 2, t = lane & 3;
  const int n = static_cast<int>(args.n);
  const int64_t b_rows_per_expert = Gated ? 2 * args.n : args.n;
  const int rows_here = work.row_end - work.row_begin;
  const T* bias =
      HasBias ? static_cast<const T*>(args.bias) + work.expert * b_rows_per_expert : nullptr;
  T* c = static_cast<T*>(args.c) + static_cast<int64_t>(work.row_begin) * n;
  const bool vector_rows = (n & 7) == 0;  // 16-byte aligned rows
  // This lane's fragment address for block 0 of row g: buf is 256-aligned, so the swizzle of
  // block jj is an XOR of jj << 4 into bits 4-7 (the row's chunk bits), and row g + 8 (same
  // swizzle) is 2048 bytes further.
  const uint32_t lane_base = buf + g * 256 + (g << 4) + t * 4;
#pragma unroll
  for (int chunk = 0; chunk < kChunks; ++chunk) {
#pragma unroll
    for (int jj = 0; jj < 16; ++jj) {
      const int j = chunk * 16 + jj;  // accumulator block (8 columns); up block j + 16 if gated
      const int col = n0 + j * 8 + 2 * t;
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const float u0 = Gated ? acc[(Gated ? j + 16 : j) * 4 + half * 2] : 0.0f;
        const float u1 = Gated ? acc[(Gated ? j + 16 : j) * 4 + half * 2 + 1] : 0.0f;
        // Columns past N hold zeros (TMA fill): their bias is not read, nothing is stored.
        const float v0 = col < n ? wgmma_epilogue_value<T, Gated, HasBias, kAct>(
                                       args, bias, col, acc[j * 4 + half * 2], u0)
                                 : 0.0f;
        const float v1 = col + 1 < n ? wgmma_epilogue_value<T, Gated, HasBias, kAct>(
                                           args, bias, col + 1, acc[j * 4 + half * 2 + 1], u1)
                                     : 0.0f;
        st_shared_u32((lane_base ^ (jj << 4)) + half * 2048, pack_pair<T>(v0, v1));
      }
    }
    __syncwarp();
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const int r = 2 * i + (lane >> 4), ch = lane & 15;
      const uint4 v = ld_shared_v4(buf + r * 256 + ((ch ^ (r & 7)) << 4));
      const int row = warp_row0 + r;
      const int col = n0 + chunk * 128 + ch * 8;
      if (row < rows_here && col < n) {
        T* dst = c + static_cast<int64_t>(row) * n + col;
        if (vector_rows) {  // col is a multiple of 8 below N, so all 8 columns are inside
          *reinterpret_cast<uint4*>(dst) = v;
        } else {
          const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
          for (int e = 0; e < 8; ++e) {
            if (col + e < n) {
              const uint16_t bits = static_cast<uint16_t>(words[e / 2] >> (16 * (e % 2)));
              memcpy(dst + e, &bits, 2);
            }
          }
        }
      }
    }
    __syncwarp();  // the buffer is rewritten by the next chunk
  }
}

// store_wgmma_tile's dispatch for the staged epilogue: bias or not, and the activation fixed at
// compile time for GEMM2 (none), SiLU-gated and SwiGLU-OAI.
template <typename T, bool Gated>
__device__ __forceinline__ void store_wgmma_tile_staged(const float (&acc)[128],
                                                        const GroupedGemmArgs& args,
                                                        const TileWork& work, int n0, int warp_row0,
                                                        uint32_t buf) {
  const bool has_bias = args.bias != nullptr;
  if constexpr (Gated) {
    constexpr int kSilu = static_cast<int>(MoEActKind::kSiluGated);
    constexpr int kSwiglu = static_cast<int>(MoEActKind::kSwigluOai);
    if (args.act.kind == MoEActKind::kSiluGated) {
      if (has_bias) {
        return store_wgmma_acc_staged<T, true, true, kSilu>(acc, args, work, n0, warp_row0, buf);
      }
      return store_wgmma_acc_staged<T, true, false, kSilu>(acc, args, work, n0, warp_row0, buf);
    }
    if (args.act.kind == MoEActKind::kSwigluOai) {
      if (has_bias) {
        return store_wgmma_acc_staged<T, true, true, kSwiglu>(acc, args, work, n0, warp_row0, buf);
      }
      return store_wgmma_acc_staged<T, true, false, kSwiglu>(acc, args, work, n0, warp_row0, buf);
    }
    if (has_bias) {
      return store_wgmma_acc_staged<T, true, true, kAnyAct>(acc, args, work, n0, warp_row0, buf);
    }
    return store_wgmma_acc_staged<T, true, false, kAnyAct>(acc, args, work, n0, warp_row0, buf);
  } else {
    if (args.epilogue == GroupedEpilogue::kBias) {
      if (has_bias) {
        return store_wgmma_acc_staged<T, false, true, kNoAct>(acc, args, work, n0, warp_row0, buf);
      }
      return store_wgmma_acc_staged<T, false, false, kNoAct>(acc, args, work, n0, warp_row0, buf);
    }
    // Plain activations (ReLU², SiLU, GELU without gate: rare) store straight from the
    // accumulators; their run-time switch in the staged loop costs the kernel register spills.
    const int lane = static_cast<int>(threadIdx.x) & 31;
    return store_wgmma_tile<T, false>(acc, args, work, n0, warp_row0 + (lane >> 2));
  }
}

// The m tiles of all experts; every lane gets the total.
template <int BM>
__device__ __forceinline__ int count_m_tiles(const int32_t* __restrict__ offsets, int num_experts) {
  int tiles = 0;
  for (int e = static_cast<int>(threadIdx.x & 31); e < num_experts; e += 32) {
    const int rows = __ldg(offsets + e + 1) - __ldg(offsets + e);
    tiles += (max(rows, 0) + BM - 1) / BM;
  }
#pragma unroll
  for (int d = 16; d > 0; d >>= 1) tiles += __shfl_xor_sync(0xffffffffu, tiles, d);
  return tiles;
}

// Tile t → (m tile, n tile): groups of kGroupM m tiles × all n tiles, m fastest.
__device__ __forceinline__ void persistent_tile_coords(int tile, int m_tiles, int n_tiles,
                                                       int& m_tile, int& n_tile) {
  const int group_tiles = kGroupM * n_tiles;
  const int group = tile / group_tiles;
  const int first_m = group * kGroupM;
  const int group_m = min(m_tiles - first_m, kGroupM);
  const int in_group = tile - group * group_tiles;
  m_tile = first_m + in_group % group_m;
  n_tile = in_group / group_m;
}

// Tile t of a persistent launch: its n tile and its expert's rows.
template <int BM>
__device__ __forceinline__ TileWork persistent_tile_work(const int32_t* __restrict__ offsets,
                                                         int num_experts, int tile, int m_tiles,
                                                         int n_tiles, int& n_tile) {
  int m_tile;
  persistent_tile_coords(tile, m_tiles, n_tiles, m_tile, n_tile);
  TileWork work;
  find_tile<BM>(offsets, num_experts, m_tile, work);
  return work;
}

// The tile hand-off of a persistent TMA kernel (this file's and fp8_gemm_tma.cuh's): the producer
// warp passes each tile index, then an end mark (an index >= num_tiles), through kSlots
// shared-memory slots, each with a full barrier (1 arrival: the producer) and an empty one (one
// arrival per consumer warp).
struct TileHandoff {
  uint32_t full_bar;   // [kSlots]
  uint32_t empty_bar;  // [kSlots]
  uint32_t slots;      // [kSlots] int
};

// Thread 0 initialises the barriers of a persistent TMA kernel: per stage a full barrier
// (full_arrivals: the producer's, plus the TMA bytes) and an empty one (one arrival per consumer
// warp), per tile slot the hand-off's two. The caller then syncs the CTA.
template <int kStages, int kSlots>
__device__ __forceinline__ void init_tma_barriers(uint32_t full_bar, uint32_t empty_bar,
                                                  uint32_t full_arrivals, const TileHandoff& h,
                                                  uint32_t consumer_warps) {
  if (threadIdx.x != 0) return;
#pragma unroll
  for (int s = 0; s < kStages; ++s) {
    mbar_init(full_bar + s * 8, full_arrivals);
    mbar_init(empty_bar + s * 8, consumer_warps);
  }
#pragma unroll
  for (int s = 0; s < kSlots; ++s) {
    mbar_init(h.full_bar + s * 8, 1);
    mbar_init(h.empty_bar + s * 8, consumer_warps);
  }
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

// The producer warp's loop: takes tiles from the launch's device counter, hands each to the
// consumers and calls produce(tile) (the whole warp) for it; the last producer warp to finish
// (of kProducersPerCta a CTA) resets the counter slot for the launch that takes it next.
template <int kSlots, int kProducersPerCta = 1, class Produce>
__device__ __forceinline__ void produce_tiles(unsigned* counter, int num_tiles,
                                              const TileHandoff& h, Produce&& produce) {
  const int lane = static_cast<int>(threadIdx.x) & 31;
  int next = 0;
  if (lane == 0) next = static_cast<int>(atomicAdd(&counter[0], 1u));
  next = __shfl_sync(0xffffffffu, next, 0);
  for (uint32_t i = 0;; ++i) {
    const int tile = next;
    if (lane == 0) {  // hand the tile (or the end mark) to the consumers
      const uint32_t slot = i % kSlots;
      mbar_wait(h.empty_bar + slot * 8, ((i / kSlots) & 1) ^ 1);
      st_shared_u32(h.slots + slot * 4, static_cast<uint32_t>(tile));
      mbar_arrive(h.full_bar + slot * 8);  // release: the slot's value is visible
    }
    if (tile >= num_tiles) break;
    // The next tile's index is fetched while this tile's loads are issued.
    if (lane == 0) next = static_cast<int>(atomicAdd(&counter[0], 1u));
    produce(tile);
    next = __shfl_sync(0xffffffffu, next, 0);
  }
  if (lane == 0) {
    // Every CTA has taken its last tile once all have counted themselves here.
    __threadfence();
    if (atomicAdd(&counter[1], 1u) == gridDim.x * kProducersPerCta - 1) {
      atomicExch(&counter[0], 0u);
      atomicExch(&counter[1], 0u);
    }
  }
}

// A consumer warp's loop: consume(tile) for every tile handed over, until the end mark.
template <int kSlots, class Consume>
__device__ __forceinline__ void consume_tiles(int num_tiles, const TileHandoff& h,
                                              Consume&& consume) {
  const int lane = static_cast<int>(threadIdx.x) & 31;
  for (uint32_t i = 0;; ++i) {
    const uint32_t slot = i % kSlots;
    mbar_wait(h.full_bar + slot * 8, (i / kSlots) & 1);
    const int tile = static_cast<int>(ld_shared_u32(h.slots + slot * 4));
    __syncwarp();
    if (lane == 0) mbar_arrive(h.empty_bar + slot * 8);
    if (tile >= num_tiles) break;
    consume(tile);
  }
}

// A consumer warpgroup with no rows in a tile frees each of the tile's k_tiles stages once it has
// landed (waiting for it keeps this warpgroup's arrivals in the phase of that use); `it` counts
// the stage uses.
template <int kStages>
__device__ __forceinline__ void skip_stages(uint32_t full_bar, uint32_t empty_bar, int k_tiles,
                                            uint32_t& it) {
  const int lane = static_cast<int>(threadIdx.x) & 31;
  for (int kt = 0; kt < k_tiles; ++kt, ++it) {
    const uint32_t stage = it % kStages;
    mbar_wait(full_bar + stage * 8, (it / kStages) & 1);
    if (lane == 0) mbar_arrive(empty_bar + stage * 8);
    __syncwarp();
  }
}

#endif  // MG_GROUPED_GEMM_WGMMA

// kStaged: see the file comment (epilogue).
template <typename T, bool Gated, bool kStaged>
__global__ void __launch_bounds__(TmaTile::kThreads, 1)
    grouped_gemm_tma_kernel(const __grid_constant__ CUtensorMap map_a,
                            const __grid_constant__ CUtensorMap map_b, const GroupedGemmArgs args,
                            int n_tiles, unsigned counter_slot) {
#ifdef MG_GROUPED_GEMM_WGMMA
  constexpr int BM = TmaTile::BM, BK = TmaTile::BK, kStages = TmaTile::Stages;
  constexpr int BN = Gated ? TmaTile::BRows / 2 : TmaTile::BRows;  // output columns
  constexpr int kABytes = TmaTile::kABytes, kAHalfBytes = TmaTile::kAHalfBytes;
  constexpr int kBBytes = TmaTile::kBBytes, kStageBytes = TmaTile::kStageBytes;
  constexpr int kSlots = TmaTile::kTileSlots;
  extern __shared__ uint8_t smem_raw[];
  const uint32_t smem_base = (smem_u32(smem_raw) + 1023u) & ~1023u;
  const uint32_t full_bar = smem_base + TmaTile::barrier_offset<kStaged>();  // [kStages]
  const uint32_t empty_bar = full_bar + kStages * 8;                         // [kStages]
  const uint32_t slot_full_bar = empty_bar + kStages * 8;                    // [kSlots]
  const uint32_t slot_empty_bar = slot_full_bar + kSlots * 8;                // [kSlots]
  const uint32_t tile_slots = slot_empty_bar + kSlots * 8;                   // [kSlots] int
  const TileHandoff handoff{slot_full_bar, slot_empty_bar, tile_slots};

  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid & 31, warp = tid >> 5, warpgroup = warp >> 2;
  // Full: the producer's arrive.expect_tx (+ the TMA bytes).
  init_tma_barriers<kStages, kSlots>(full_bar, empty_bar, 1, handoff, TmaTile::kConsumerWarps);
  __syncthreads();

  const int num_experts = static_cast<int>(args.num_experts);
  const int m_tiles = count_m_tiles<BM>(args.expert_offsets, num_experts);
  const int num_tiles = m_tiles * n_tiles;
  const int k_tiles = (static_cast<int>(args.k) + BK - 1) / BK;

  if (warpgroup == 0) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(TmaTile::kProducerRegs));
    if (warp != 0) return;
    if (lane == 0) {
      asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(&map_a))
                   : "memory");
      asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(&map_b))
                   : "memory");
    }
    uint32_t it = 0;  // k steps issued by this CTA (lane 0): stage it % kStages, use it / kStages
    // The loads of one tile (the whole warp finds the tile, lane 0 issues).
    const auto produce = [&](int tile) {
      int n_tile;
      const TileWork work = persistent_tile_work<BM>(args.expert_offsets, num_experts, tile,
                                                     m_tiles, n_tiles, n_tile);
      if (lane == 0) {
        const bool both_halves = work.row_end - work.row_begin > 64;
        const uint32_t bytes = (both_halves ? 2 : 1) * kAHalfBytes + kBBytes;
        const int n0 = n_tile * BN;
        for (int kt = 0; kt < k_tiles; ++kt, ++it) {
          const uint32_t stage = it % kStages;
          // Use u of a stage waits for the consumers' release of use u - 1 (phase u - 1 of
          // its empty barrier); use 0 passes at once.
          mbar_wait(empty_bar + stage * 8, ((it / kStages) & 1) ^ 1);
          const uint32_t full = full_bar + stage * 8;
          mbar_arrive_expect_tx(full, bytes);
          const uint32_t s_a = smem_base + stage * kStageBytes;
          const uint32_t s_b = s_a + kABytes;
          const int k0 = kt * BK;
          tma_load_2d(s_a, map_a, full, k0, work.row_begin);
          if (both_halves) tma_load_2d(s_a + kAHalfBytes, map_a, full, k0, work.row_begin + 64);
          tma_load_4d(s_b, map_b, full, k0, n0, 0, work.expert);
          if constexpr (Gated) tma_load_4d(s_b + kBBytes / 2, map_b, full, k0, n0, 1, work.expert);
        }
      }
      __syncwarp();
    };
    produce_tiles<kSlots>(g_tile_counters[counter_slot], num_tiles, handoff, produce);
  } else {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(TmaTile::kConsumerRegs));
    const int half = warpgroup - 1;  // this warpgroup's rows: [64 half, 64 half + 64)
    const uint32_t staging =
        smem_base + TmaTile::kStagingOffset + (warp - 4) * TmaTile::kStagingBytes;
    uint32_t it = 0;  // k steps consumed, in the producer's order
    const auto consume = [&](int tile) {
      int n_tile;
      const TileWork work = persistent_tile_work<BM>(args.expert_offsets, num_experts, tile,
                                                     m_tiles, n_tiles, n_tile);
      if (work.row_end - work.row_begin <= half * 64) {  // no rows for this warpgroup
        skip_stages<kStages>(full_bar, empty_bar, k_tiles, it);
        return;
      }
      // The whole main loop sits in this branch: no wgmma group is in flight where the
      // warpgroup's paths join (the compiler would otherwise serialise the wgmmas).
      float acc[128];
#pragma unroll
      for (int i = 0; i < 128; ++i) acc[i] = 0.0f;
      for (int kt = 0; kt < k_tiles; ++kt, ++it) {
        const uint32_t stage = it % kStages;
        mbar_wait(full_bar + stage * 8, (it / kStages) & 1);
        __syncwarp();
        const uint32_t s_a = smem_base + stage * kStageBytes + half * kAHalfBytes;
        const uint32_t s_b = smem_base + stage * kStageBytes + kABytes;
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < BK / 16; ++kk) {
          wgmma_m64n256k16<T>(acc, wgmma_desc(s_a + kk * 32), wgmma_desc(s_b + kk * 32));
        }
        wgmma_commit();
        // The group of the previous k step has finished reading its stage: free it.
        wgmma_wait<1>(acc);
        if (kt > 0 && lane == 0) mbar_arrive(empty_bar + ((it - 1) % kStages) * 8);
        __syncwarp();
      }
      wgmma_wait<0>(acc);
      if (lane == 0) mbar_arrive(empty_bar + ((it - 1) % kStages) * 8);
      __syncwarp();
      const int warp_row0 = half * 64 + (warp & 3) * 16;
      if constexpr (kStaged) {
        store_wgmma_tile_staged<T, Gated>(acc, args, work, n_tile * BN, warp_row0, staging);
      } else {
        store_wgmma_tile<T, Gated>(acc, args, work, n_tile * BN, warp_row0 + (lane >> 2));
      }
    };
    consume_tiles<kSlots>(num_tiles, handoff, consume);
  }
#endif  // MG_GROUPED_GEMM_WGMMA
}

// ---------------------------------------------------------------------------------------------
// Host side: tensor maps.

// cuTensorMapEncodeTiled from the driver, looked up once through the runtime.
inline PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    MG_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000,
                                                   cudaEnableDefault, &found));
    MG_CHECK(found == cudaDriverEntryPointSuccess && fn != nullptr,
             "grouped GEMM: the driver has no cuTensorMapEncodeTiled");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }();
  return encode;
}

// The dynamic scheduler's counter slot for the next launch (see g_tile_counters).
inline unsigned tile_counter_slot() {
  static std::atomic<unsigned> launches{0};
  return launches.fetch_add(1, std::memory_order_relaxed) % kTileCounterSlots;
}

// A tiled map with 128-byte swizzle over a row-major tensor of `rank` dims (innermost first),
// boxes of `box` elements.
template <typename T>
CUtensorMap encode_tensor_map(const void* base, int rank, const cuuint64_t* dims,
                              const cuuint64_t* strides_bytes, const cuuint32_t* box) {
  // uint8_t: FP8 codes (fp8_gemm_tma.cuh); TMA moves bytes, the type only sizes the elements.
  static_assert(std::is_same_v<T, __nv_bfloat16> || std::is_same_v<T, __half> ||
                std::is_same_v<T, uint8_t>);
  const CUtensorMapDataType type = std::is_same_v<T, __nv_bfloat16>
                                       ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                   : std::is_same_v<T, __half> ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
                                                               : CU_TENSOR_MAP_DATA_TYPE_UINT8;
  const cuuint32_t element_strides[4] = {1, 1, 1, 1};
  CUtensorMap map;
  const CUresult result = tensor_map_encoder()(
      &map, type, static_cast<cuuint32_t>(rank), const_cast<void*>(base), dims, strides_bytes, box,
      element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
      CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  MG_CHECK(result == CUDA_SUCCESS,
           "grouped GEMM: cuTensorMapEncodeTiled failed ({}); pointers must be 16-byte aligned",
           static_cast<int>(result));
  return map;
}

// Whether the TMA kernel takes the problem: the driver rejects a tensor map whose box is larger
// than the tensor in any dimension, so K >= 64, max_rows >= 64 and N >= the weight box's rows
// (256 plain, 128 gated). Smaller problems go to the other kernels.
inline bool tma_shape_ok(const GroupedGemmArgs& args, bool gated) {
  return args.k >= TmaTile::BK && args.max_rows >= 64 &&
         args.n >= (gated ? TmaTile::BRows / 2 : TmaTile::BRows);
}

// A [max_rows, K]: boxes of 64 rows × 64 k (one consumer warpgroup's rows).
template <typename T>
CUtensorMap tma_map_a(const GroupedGemmArgs& args) {
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(args.k),
                              static_cast<cuuint64_t>(args.max_rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(args.k) * sizeof(T)};
  const cuuint32_t box[2] = {TmaTile::BK, 64};
  return encode_tensor_map<T>(args.a, 2, dims, strides, box);
}

// B [E, N_b, K] as [E][G][N][K] with G = 2 (gate rows, then up rows) when gated, else 1: boxes of
// 256 / G weight rows × 64 k, zero past each expert's N.
template <typename T, bool Gated>
CUtensorMap tma_map_b(const GroupedGemmArgs& args) {
  constexpr int kG = Gated ? 2 : 1;
  const cuuint64_t k = static_cast<cuuint64_t>(args.k), n = static_cast<cuuint64_t>(args.n);
  const cuuint64_t dims[4] = {k, n, kG, static_cast<cuuint64_t>(args.num_experts)};
  const cuuint64_t strides[3] = {k * sizeof(T), n * k * sizeof(T), kG * n * k * sizeof(T)};
  const cuuint32_t box[4] = {TmaTile::BK, TmaTile::BRows / kG, 1, 1};
  return encode_tensor_map<T>(args.b, 4, dims, strides, box);
}

}  // namespace grouped_gemm
}  // namespace mg::cuda
