// The TMA-fed, warp-specialised, persistent FP8 grouped GEMMs (sm_90a) for the compute-bound
// regime (tens to thousands of rows per expert): Fp8GemmKernel::kTma ("fp8_tma", 128-row tiles)
// and kTma64 ("fp8_tma64", the same kernel run as two 64-row pipelines; below). nvcc only;
// included by fp8_gemm_tma_<dtype>_<gated|plain>.cu.
//
// The BF16 TMA kernel's structure (ops/moe/cuda/grouped_gemm_tma.cuh, whose barriers, tile
// scheduler and tensor-map encoding this reuses) with fp8_wgmma's math (fp8_gemm_wgmma.cuh):
//   warpgroup 0    producer (setmaxnreg down): its warp 0 takes tiles from the device counter and,
//                  per 128-wide K block, waits for a free stage, then lane 0 issues the TMA loads
//                  of the tile's A rows and weight rows while all 32 lanes copy the block's 256
//                  scales (one per weight row of the tile, one per row) with 4-byte cp.async whose
//                  completion each lane's cp.async.mbarrier.arrive.noinc ties to the same full
//                  barrier (33 arrivals: 32 lanes + lane 0's arrive.expect_tx, plus the TMA bytes).
//   warpgroups 1-2 consumers, rows [0, 64) and [64, 128) of the tile: per K block wait for the full
//                  stage, four wgmma m64n128k32 e4m3 into a zeroed partial, wait for them, promote
//                  the partial into the fp32 accumulators with xs[row][kb] · S[..][col][kb] read
//                  from the stage's scales (where every scale block holds whole gate / up halves
//                  of the tiles, e.g. 128 x 128 blocks or one per tensor, one weight scale per
//                  half: 4 products for the 64 accumulators instead of 64, 1.03-1.23x on the layer
//                  at 1024-4096 tokens), free the stage. The two warpgroups are not tied by any
//                  CTA barrier, so one promotes while the tensor cores run the other's wgmmas (the
//                  cp.async fp8_wgmma kernel's __syncthreads per block kept them in step, so the
//                  tensor cores idled through every promotion).
// Tile: 128 rows × 128 weight rows (gated: 64 gate rows n0.. and the 64 up rows N + n0.., 64
// output columns; plain: 128 columns), 6 stages of 32 KB + 1 KB of scales. The partial and the
// accumulators are 128 registers a consumer thread, so 256 weight rows (the BF16 tile) do not fit.
// The sums and their order are fp8_wgmma's, so the two give the same bits.
//
// fp8_tma64 runs the same code as two independent pipelines in a CTA (Fp8TmaTileT<2>): warps 0
// and 1 of warpgroup 0 are the producers, warpgroup 1 consumes pipeline 0's tiles and warpgroup 2
// pipeline 1's, each with its own 4 stages, barriers and tile hand-off in its own part of shared
// memory, all taking 64-row tiles from the one device counter. No warpgroup waits for the other,
// and an expert's rows round up to 64 instead of 128; the price is a weight tile loaded per 64 rows
// instead of per 128 (twice the L2 reads for the same rows), so which wins depends on the rows per
// expert (the FP8 kernel table, ops/moe/heuristics/fp8_kernel_choice.cc).
//
// Bounds: TMA fills zeros past K, past N (the weight map is 4-D [E][gate/up][N][K]) and past
// max_rows; A rows past an expert's last row are the next expert's rows, computed and never
// stored; their scales, and those of weight rows past N, are a clamped neighbour's. The boxes must
// fit the tensors (fp8_tma_shape_check: K >= 128, >= 64 rows, N >= the weight box's rows).
#pragma once

#include "ops/moe/cuda/fp8/fp8_gemm_wgmma.cuh"
#include "ops/moe/cuda/grouped_gemm_tma.cuh"

namespace mg::cuda::fp8 {

// Pipelines = 1 (fp8_tma): one 128-row tile at a time, both consumer warpgroups on it (64 rows
// each), one producer warp. Pipelines = 2 (fp8_tma64): two independent pipelines in the CTA, each
// a producer warp, a consumer warpgroup, its own stages and tile hand-off, on 64-row tiles: one
// warpgroup's epilogue runs while the other's wgmmas do, and an expert's last tile wastes at most
// 63 rows instead of 127, for twice the weight-tile loads per row.
template <int Pipelines>
struct Fp8TmaTileT {
  static constexpr int kPipelines = Pipelines;
  static constexpr int BM = 128 / Pipelines, BRows = 128, BK = 128;
  static constexpr int Stages = Pipelines == 1 ? 6 : 4;  // per pipeline
  static constexpr int kThreads = 384;  // producer warpgroup + 2 consumer warpgroups
  static constexpr int kConsumerWarps = 8 / Pipelines;  // a pipeline's: they free a stage or slot
  // The producer computes the scale sources of its lanes (8 offsets) besides the TMA issue.
  static constexpr int kProducerRegs = 48, kConsumerRegs = 224;
  static constexpr int kAHalfBytes = 64 * BK;  // one consumer warpgroup's rows: one A box
  static constexpr int kABytes = BM * BK;
  static constexpr int kBBytes = BRows * BK;
  static constexpr int kStageBytes = kABytes + kBBytes;
  static constexpr int kScaleFloats = BRows + BM;  // per stage: weight rows', then rows'
  static constexpr int kScalesPerLane = kScaleFloats / 32;
  static constexpr int kTileSlots = 4;
  // A pipeline's region, from a 1024-aligned base: the stages, their scales, the barriers (full
  // and empty per stage, full and empty per tile slot) and the tile slots, rounded up to 1024; +
  // 1024 for aligning the base.
  static constexpr int kScaleOffset = Stages * kStageBytes;
  static constexpr int kBarrierOffset = kScaleOffset + Stages * kScaleFloats * 4;
  static constexpr int kPipelineBytes =
      (kBarrierOffset + (2 * Stages + 2 * kTileSlots) * 8 + kTileSlots * 4 + 1023) / 1024 * 1024;
  static constexpr int kSmemBytes = 1024 + Pipelines * kPipelineBytes;
  // setmaxnreg moves registers within the CTA's allocation, which the launch bound sets at 168 a
  // thread (65536 / 384 rounded down to a multiple of 8): a consumer's setmaxnreg.inc that asks
  // for more than the producer's .dec gave back waits forever.
  static_assert(128 * kProducerRegs + 256 * kConsumerRegs <= kThreads * 168,
                "setmaxnreg counts exceed the CTA's registers");
  static_assert(kSmemBytes <= 227 * 1024, "shared memory over the sm_90 limit");
  static_assert(BRows % 32 == 0 && BM % 32 == 0,
                "each lane copies whole weight-row and row scale sets");
  static_assert(kStageBytes % 1024 == 0, "stages at the 1024-byte swizzle atom");
};
using Fp8TmaTile = Fp8TmaTileT<1>;
static_assert(Fp8TmaTile::BRows == Fp8WgmmaTile::BRows,
              "the epilogue (store_wgmma_acc) is fp8_wgmma's, for its 128 weight rows");

#ifdef MG_FP8_GEMM_WGMMA

// Issues a 4-byte cp.async; the lane's cp.async.mbarrier.arrive.noinc later counts it on a barrier.
__device__ __forceinline__ void cp_async_4(uint32_t dst, const float* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(dst), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_async_arrive_noinc(uint32_t bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}

#endif  // MG_FP8_GEMM_WGMMA

template <typename T, bool Gated, int Pipelines>
__global__ void __launch_bounds__(Fp8TmaTile::kThreads, 1)
    fp8_gemm_tma_kernel(const __grid_constant__ CUtensorMap map_a,
                        const __grid_constant__ CUtensorMap map_b, const Fp8GemmArgs args,
                        int n_tiles, unsigned counter_slot, bool uniform_weight_scales) {
#ifdef MG_FP8_GEMM_WGMMA
  using namespace grouped_gemm;
  using Tile = Fp8TmaTileT<Pipelines>;
  constexpr int BM = Tile::BM, BK = Tile::BK, kStages = Tile::Stages, kSlots = Tile::kTileSlots;
  constexpr int BN = Gated ? Tile::BRows / 2 : Tile::BRows;  // output columns
  constexpr int kABytes = Tile::kABytes, kAHalfBytes = Tile::kAHalfBytes;
  constexpr int kBBytes = Tile::kBBytes, kStageBytes = Tile::kStageBytes;
  constexpr int kScaleFloats = Tile::kScaleFloats;
  extern __shared__ uint8_t smem_raw[];
  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid & 31, warp = tid >> 5, warpgroup = warp >> 2;
  // This thread's pipeline: the producer warp's index, or the consumer warpgroup's.
  const int pipeline = Pipelines == 1 ? 0 : (warpgroup == 0 ? warp : warpgroup - 1);
  const uint32_t raw_base = smem_u32(smem_raw);
  const uint32_t aligned_base = (raw_base + 1023u) & ~1023u;
  const uint32_t smem_base = aligned_base + pipeline * Tile::kPipelineBytes;
  const uint32_t scale_base = smem_base + Tile::kScaleOffset;  // [kStages][kScaleFloats]
  const float* scale_smem = reinterpret_cast<const float*>(smem_raw + (scale_base - raw_base));
  // Per pipeline: full and empty barriers per stage, the tile hand-off's barriers and slots.
  const auto barriers = [&](uint32_t base, uint32_t& full, uint32_t& empty, TileHandoff& h) {
    full = base + Tile::kBarrierOffset;  // [kStages]
    empty = full + kStages * 8;          // [kStages]
    h.full_bar = empty + kStages * 8;    // [kSlots]
    h.empty_bar = h.full_bar + kSlots * 8;
    h.slots = h.empty_bar + kSlots * 8;
  };
  uint32_t full_bar, empty_bar;
  TileHandoff handoff;
  barriers(smem_base, full_bar, empty_bar, handoff);
  if (tid == 0) {
    for (int p = 0; p < Pipelines; ++p) {
      uint32_t full, empty;
      TileHandoff h;
      barriers(aligned_base + p * Tile::kPipelineBytes, full, empty, h);
      // Full: lane 0's arrive.expect_tx (+ the TMA bytes) and the 32 lanes' cp.async arrivals.
      init_tma_barriers<kStages, kSlots>(full, empty, 1 + 32, h, Tile::kConsumerWarps);
    }
  }
  __syncthreads();

  const int num_experts = static_cast<int>(args.num_experts);
  const int m_tiles = count_m_tiles<BM>(args.expert_offsets, num_experts);
  const int num_tiles = m_tiles * n_tiles;
  const int k = static_cast<int>(args.k), n = static_cast<int>(args.n);
  const int k_tiles = (k + BK - 1) / BK;

  if (warpgroup == 0) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(Tile::kProducerRegs));
    if (warp >= Pipelines) return;
    if (lane == 0) {
      asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(&map_a))
                   : "memory");
      asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(&map_b))
                   : "memory");
    }
    // Scale layouts: S [E, s_rows, s_cols] (weight rows in blocks of block_n, K in blocks of
    // block_k, a multiple of 128 or all of K) and xs [max_rows, a_cols] (a_cols = 1: per token).
    const int block_n = static_cast<int>(args.b_scales.block_n);
    const int block_k = static_cast<int>(args.b_scales.block_k);
    const int s_rows = static_cast<int>(((Gated ? 2 : 1) * args.n + block_n - 1) / block_n);
    const int s_cols = static_cast<int>((args.k + block_k - 1) / block_k);
    const int a_cols = static_cast<int>(fp8_act_scale_cols(args.k, args.a_per_token));
    uint32_t it = 0;  // K blocks issued by this CTA: stage it % kStages, use it / kStages
    const auto produce = [&](int tile) {
      int n_tile;
      const TileWork work = persistent_tile_work<BM>(args.expert_offsets, num_experts, tile,
                                                     m_tiles, n_tiles, n_tile);
      const bool both_halves = Pipelines == 1 && work.row_end - work.row_begin > 64;
      const uint32_t bytes = (both_halves ? 2 : 1) * kAHalfBytes + kBBytes;
      const int n0 = n_tile * BN;
      // Lane l copies the scales of weight rows l + 32 i and rows l + 32 i of the tile: their
      // offsets at K block 0 (the block adds kb * 128 / block_k, or kb for the rows).
      int offset[Tile::kScalesPerLane];
#pragma unroll
      for (int i = 0; i < Tile::BRows / 32; ++i) {
        const int r = lane + 32 * i;
        const bool up = Gated && r >= BN;
        const int col = min(n0 + (up ? r - BN : r), n - 1);
        offset[i] = (work.expert * s_rows + (up ? n + col : col) / block_n) * s_cols;
      }
#pragma unroll
      for (int i = 0; i < BM / 32; ++i) {
        const int row = min(work.row_begin + lane + 32 * i, static_cast<int>(args.max_rows) - 1);
        offset[Tile::BRows / 32 + i] = row * a_cols;
      }
      for (int kt = 0; kt < k_tiles; ++kt, ++it) {
        const uint32_t stage = it % kStages;
        // Use u of a stage waits for the consumers' release of use u - 1 (phase u - 1 of its
        // empty barrier); use 0 passes at once.
        mbar_wait(empty_bar + stage * 8, ((it / kStages) & 1) ^ 1);
        const uint32_t full = full_bar + stage * 8;
        if (lane == 0) {
          mbar_arrive_expect_tx(full, bytes);
          const uint32_t s_a = smem_base + stage * kStageBytes;
          const uint32_t s_b = s_a + kABytes;
          const int k0 = kt * BK;
          tma_load_2d(s_a, map_a, full, k0, work.row_begin);
          if (both_halves) tma_load_2d(s_a + kAHalfBytes, map_a, full, k0, work.row_begin + 64);
          tma_load_4d(s_b, map_b, full, k0, n0, 0, work.expert);
          if constexpr (Gated) tma_load_4d(s_b + kBBytes / 2, map_b, full, k0, n0, 1, work.expert);
        }
        const uint32_t s_scales = scale_base + stage * kScaleFloats * 4;
        const int b_col = kt * BK / block_k, a_col = a_cols == 1 ? 0 : kt;
#pragma unroll
        for (int i = 0; i < Tile::kScalesPerLane; ++i) {
          const bool weight = i < Tile::BRows / 32;
          const float* src =
              weight ? args.b_scales.scales + offset[i] + b_col : args.a_scales + offset[i] + a_col;
          cp_async_4(s_scales + (lane + 32 * i) * 4, src);
        }
        cp_async_arrive_noinc(full);
      }
    };
    produce_tiles<kSlots, Pipelines>(g_tile_counters[counter_slot], num_tiles, handoff, produce);
    // Nothing of this warp's in flight when it leaves (the consumers wait for all of it anyway).
    asm volatile("cp.async.wait_all;\n" ::: "memory");
  } else {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(Tile::kConsumerRegs));
    // This warpgroup's rows of the tile: [64 half, 64 half + 64).
    const int half = Pipelines == 1 ? warpgroup - 1 : 0;
    // The lane's rows in the tile: row0 and row0 + 8 (the m64 accumulator layout).
    const int row0 = half * 64 + (warp & 3) * 16 + (lane >> 2);
    uint32_t it = 0;  // K blocks consumed, in the producer's order
    const auto consume = [&](int tile) {
      int n_tile;
      const TileWork work = persistent_tile_work<BM>(args.expert_offsets, num_experts, tile,
                                                     m_tiles, n_tiles, n_tile);
      if (work.row_end - work.row_begin <= half * 64) {  // no rows for this warpgroup
        skip_stages<kStages>(full_bar, empty_bar, k_tiles, it);
        return;
      }
      // The whole main loop sits in this branch: no wgmma group is in flight where the
      // warpgroup's paths join.
      float acc[64], part[64];
#pragma unroll
      for (int i = 0; i < 64; ++i) {
        acc[i] = 0.0f;
        part[i] = 0.0f;
      }
      for (int kt = 0; kt < k_tiles; ++kt, ++it) {
        const uint32_t stage = it % kStages;
        mbar_wait(full_bar + stage * 8, (it / kStages) & 1);
        __syncwarp();
        const uint32_t s_a = smem_base + stage * kStageBytes + half * kAHalfBytes;
        const uint32_t s_b = smem_base + stage * kStageBytes + kABytes;
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < BK / 32; ++kk) {
          wgmma_m64n128k32_e4m3(part, wgmma_desc(s_a + kk * 32), wgmma_desc(s_b + kk * 32), kk);
        }
        wgmma_commit();
        const float* ws = scale_smem + stage * kScaleFloats;
        const float xs0 = ws[Tile::BRows + row0], xs1 = ws[Tile::BRows + row0 + 8];
        wgmma_wait64<0>(part);
        // fp8_wgmma's promotion, in the same order (the same bits). Issuing the next block's
        // wgmmas into a second partial before this promotion was measured slower (H200,
        // docs/performance.md): the other warpgroup's wgmmas already fill the promotion.
        if (uniform_weight_scales) {
          // Every gate (or plain) weight row of the tile shares one scale, and every up row
          // another: the same products as below from 2 loads and 4 multiplies instead of 16 and 64.
          const float wg = ws[0], wu = ws[Tile::BRows / 2];
          const float s0[2] = {xs0 * wg, xs0 * wu}, s1[2] = {xs1 * wg, xs1 * wu};
#pragma unroll
          for (int j = 0; j < Tile::BRows / 8; ++j) {
            const int h = Gated && j >= Tile::BRows / 16 ? 1 : 0;
#pragma unroll
            for (int q = 0; q < 4; ++q) {
              acc[4 * j + q] = fmaf(part[4 * j + q], q < 2 ? s0[h] : s1[h], acc[4 * j + q]);
            }
          }
        } else {
#pragma unroll
          for (int j = 0; j < Tile::BRows / 8; ++j) {
            const float2 w = *reinterpret_cast<const float2*>(ws + j * 8 + (lane & 3) * 2);
#pragma unroll
            for (int q = 0; q < 4; ++q) {
              acc[4 * j + q] = fmaf(part[4 * j + q], (q < 2 ? xs0 : xs1) * ((q & 1) ? w.y : w.x),
                                    acc[4 * j + q]);
            }
          }
        }
        __syncwarp();
        if (lane == 0) mbar_arrive(empty_bar + stage * 8);
      }
      store_wgmma_acc<T, Gated>(acc, args, work, n_tile * BN, row0);
    };
    consume_tiles<kSlots>(num_tiles, handoff, consume);
  }
#endif  // MG_FP8_GEMM_WGMMA
}

// A [max_rows, K] e4m3: boxes of 64 rows × 128 codes (one consumer warpgroup's rows).
inline CUtensorMap fp8_tma_map_a(const Fp8GemmArgs& args) {
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(args.k),
                              static_cast<cuuint64_t>(args.max_rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(args.k)};
  const cuuint32_t box[2] = {Fp8TmaTile::BK, 64};
  return grouped_gemm::encode_tensor_map<uint8_t>(args.a, 2, dims, strides, box);
}

// B [E, N_b, K] e4m3 as [E][G][N][K] with G = 2 (gate rows, then up rows) when gated, else 1:
// boxes of 128 / G weight rows × 128 codes, zero past each expert's N.
template <bool Gated>
CUtensorMap fp8_tma_map_b(const Fp8GemmArgs& args) {
  constexpr int kG = Gated ? 2 : 1;
  const cuuint64_t k = static_cast<cuuint64_t>(args.k), n = static_cast<cuuint64_t>(args.n);
  const cuuint64_t dims[4] = {k, n, kG, static_cast<cuuint64_t>(args.num_experts)};
  const cuuint64_t strides[3] = {k, n * k, kG * n * k};
  const cuuint32_t box[4] = {Fp8TmaTile::BK, Fp8TmaTile::BRows / kG, 1, 1};
  return grouped_gemm::encode_tensor_map<uint8_t>(args.b, 4, dims, strides, box);
}

template <typename T, bool Gated, int Pipelines>
void launch_tma_pipelines(const Fp8GemmArgs& args, cudaStream_t stream) {
  using Tile = Fp8TmaTileT<Pipelines>;
  const int64_t m_bound = m_tiles_bound(args, Tile::BM);
  constexpr int kBN = Gated ? Tile::BRows / 2 : Tile::BRows;
  const int64_t n_tiles = (args.n + kBN - 1) / kBN;
  const int64_t tiles = m_bound * n_tiles;
  MG_CHECK(tiles <= INT32_MAX, "FP8 grouped GEMM: {} tiles exceed 32-bit tile indices", tiles);
  int device = 0, sms = 0;
  MG_CUDA_CHECK(cudaGetDevice(&device));
  MG_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  const CUtensorMap map_a = fp8_tma_map_a(args);
  const CUtensorMap map_b = fp8_tma_map_b<Gated>(args);
  static_assert(Tile::BRows == 128, "fp8_tma_weight_scales_uniform assumes 64 / 128-row halves");
  const bool uniform_weight_scales =
      fp8_tma_weight_scales_uniform(args.n, args.b_scales.block_n, Gated);
  auto* kernel = fp8_gemm_tma_kernel<T, Gated, Pipelines>;
  MG_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Tile::kSmemBytes));
  const int64_t blocks = std::min<int64_t>(sms, (tiles + Pipelines - 1) / Pipelines);
  kernel<<<static_cast<unsigned>(blocks), Tile::kThreads, Tile::kSmemBytes, stream>>>(
      map_a, map_b, args, static_cast<int>(n_tiles), grouped_gemm::tile_counter_slot(),
      uniform_weight_scales);
  MG_CUDA_CHECK_LAUNCH();
}

template <typename T, bool Gated>
void launch_tma(const Fp8GemmArgs& args, Fp8GemmKernel kernel, cudaStream_t stream) {
  MG_CHECK(is_fp8_tma_kernel(kernel), "FP8 grouped GEMM: {} is not a TMA kernel",
           fp8_gemm_kernel_name(kernel));
  const std::string why = fp8_gemm_kernel_check(kernel, grouped_gemm_sm90a_kernels());
  MG_CHECK(why.empty(), "FP8 grouped GEMM: {}", why);
  const std::string shape =
      fp8_tma_shape_check(args.n, args.k, args.max_rows, args.num_experts, args.b_scales.block_n,
                          args.b_scales.block_k, Gated);
  MG_CHECK(shape.empty(), "FP8 grouped GEMM: {}", shape);
  if (kernel == Fp8GemmKernel::kTma64) return launch_tma_pipelines<T, Gated, 2>(args, stream);
  return launch_tma_pipelines<T, Gated, 1>(args, stream);
}

}  // namespace mg::cuda::fp8
