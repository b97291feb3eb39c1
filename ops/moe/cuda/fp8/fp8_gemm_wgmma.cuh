// The wgmma (sm_90a) FP8 grouped GEMM (Fp8GemmKernel::kWgmma, "fp8_wgmma"). nvcc only; included
// by fp8_gemm_wgmma_<dtype>_<gated|plain>.cu.
//
// A CTA computes 128 rows x 128 weight rows (gated: 64 gate + 64 up rows -> 64 output columns;
// plain: 128 columns) with two warpgroups, each issuing wgmma m64n128k32 e4m3 on its 64 rows. The
// operands come from the cp.async pipeline of the mma.sync kernel (fp8_gemm_mma.cuh): its
// [rows][128 B] tiles with 16-byte chunks XOR-swizzled by (row & 7) are wgmma's 128-byte-swizzle
// K-major layout (the only one FP8 wgmma takes), so the descriptors point straight at them, stage
// bases 1024-byte aligned, k32 steps +32 bytes, exactly as the BF16 wgmma kernel's k16 steps
// (ops/moe/cuda/grouped_gemm_wgmma.cuh, whose descriptor this reuses).
//
// One stage is one 128-wide K block: its four wgmmas write a zeroed partial (the first with
// scale-d 0), the warpgroup waits for them, and the partial is promoted into the fp32
// accumulators with xs[row][kb] * S[e][col / block_n][kb * 128 / block_k], as DeepGEMM does. The
// stage's 128 + 128 scales travel with its tiles (4-byte cp.async into shared memory), so the
// promotion holds none of them in registers. The
// wait leaves the tensor cores idle during the promotion (DeepGEMM overlaps it with a second
// math warpgroup pair); loads run Stages - 1 blocks ahead.
//
// The sm_90 (non-a) compile keeps the kernel's symbol with an empty body; the launcher refuses
// the kernel unless grouped_gemm_sm90a_kernels() says the loaded binary holds the sm_90a code.
#pragma once

#include "ops/moe/cuda/fp8/fp8_gemm_mma.cuh"
#include "ops/moe/cuda/grouped_gemm_wgmma.cuh"

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define MG_FP8_GEMM_WGMMA 1
#endif

namespace mg::cuda::fp8 {

struct Fp8WgmmaTile {
  static constexpr int BM = 128, BRows = 128, BK = 128, Stages = 4, kThreads = 256;
  static constexpr int kABytes = BM * BK;
  static constexpr int kStageBytes = (BM + BRows) * BK;
  // Per stage, after all the tiles: the K block's scales of the tile's weight rows, then of its
  // rows.
  static constexpr int kScaleBytes = (BRows + BM) * 4;
  // + 1024 to align the dynamic shared memory base to the 1024-byte swizzle atom.
  static constexpr int kSmemBytes = Stages * (kStageBytes + kScaleBytes) + 1024;
};

#ifdef MG_FP8_GEMM_WGMMA

// D[64 x 128] = A[64 x 32] . B[128 x 32]^T (+ D when accumulate), e4m3 operands K-major in shared
// memory.
__device__ __forceinline__ void wgmma_m64n128k32_e4m3(float (&d)[64], uint64_t desc_a,
                                                      uint64_t desc_b, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, "
      "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, "
      "%38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, "
      "%56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]),
        "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
        "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
        "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]),
        "+f"(d[63])
      : "l"(desc_a), "l"(desc_b), "r"(accumulate));
}

template <int N>
__device__ __forceinline__ void wgmma_wait64(float (&d)[64]) {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
  // Ties the accumulators to the wait so the compiler does not read them earlier.
#pragma unroll
  for (int i = 0; i < 64; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

#endif  // MG_FP8_GEMM_WGMMA

// epilogue_value with the epilogue's function fixed at compile time (grouped_gemm::kNoAct: c =
// acc (+ bias), GEMM2; a MoEActKind value; kAnyAct: the launch's kind read at run time).
template <bool Gated, bool HasBias, int kAct>
__device__ __forceinline__ float fixed_epilogue_value(const Fp8GemmArgs& args, const float* bias,
                                                      int col, float gate, float up) {
  if constexpr (HasBias) {
    gate += bias[col];
    if constexpr (Gated) up += bias[args.n + col];
  }
  if constexpr (kAct == grouped_gemm::kNoAct) {
    return gate;
  } else {
    if constexpr (kAct == grouped_gemm::kAnyAct) {
      // The kinds without a variant of their own (store_wgmma_acc): one call, no inlined code.
      return moe_activation_call(args.act, gate, Gated ? up : 0.0f);
    } else {
      MoEActParams act = args.act;
      act.kind = static_cast<MoEActKind>(kAct);
      return moe_activation(act, gate, Gated ? up : 0.0f);
    }
  }
}

// The epilogue of a wgmma tile (this file's kernel and the TMA one, fp8_gemm_tma.cuh): the lane
// holds rows row0 and row0 + 8 of the tile (tile-relative) and, per 8-column block j, columns
// n0 + 8j + 2t (+1) (gated: gate blocks j < 8, up blocks j + 8); rows past the expert's and
// columns past N are not stored.
template <typename T, bool Gated, bool HasBias, int kAct>
__device__ __forceinline__ void store_wgmma_acc_fixed(const float (&acc)[64],
                                                      const Fp8GemmArgs& args,
                                                      const grouped_gemm::TileWork& work, int n0,
                                                      int row0) {
  constexpr int kBlocks = Fp8WgmmaTile::BRows / 8;  // 8-column accumulator blocks (gate + up)
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int n = static_cast<int>(args.n);
  const int64_t b_rows_per_expert = Gated ? 2 * args.n : args.n;
  const int rows_here = work.row_end - work.row_begin;
  const float* bias = HasBias ? args.bias + work.expert * b_rows_per_expert : nullptr;
  T* c = static_cast<T*>(args.c) + static_cast<int64_t>(work.row_begin) * n;
  const bool pair_stores = (n & 1) == 0;
  constexpr int kOutBlocks = Gated ? kBlocks / 2 : kBlocks;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int row = row0 + half * 8;
    if (row >= rows_here) continue;
    T* c_row = c + static_cast<int64_t>(row) * n;
#pragma unroll
    for (int j = 0; j < kOutBlocks; ++j) {
      const int col = n0 + j * 8 + (lane & 3) * 2;
      if (col >= n) continue;
      const int up_j = Gated ? j + kOutBlocks : j;
      const float g0 = acc[j * 4 + half * 2], g1 = acc[j * 4 + half * 2 + 1];
      const float u0 = Gated ? acc[up_j * 4 + half * 2] : 0.0f;
      const float u1 = Gated ? acc[up_j * 4 + half * 2 + 1] : 0.0f;
      const float v0 = fixed_epilogue_value<Gated, HasBias, kAct>(args, bias, col, g0, u0);
      if (pair_stores) {
        grouped_gemm::store_pair(
            c_row + col, v0,
            fixed_epilogue_value<Gated, HasBias, kAct>(args, bias, col + 1, g1, u1));
      } else {
        c_row[col] = from_float<T>(v0);
        if (col + 1 < n) {
          c_row[col + 1] = from_float<T>(
              fixed_epilogue_value<Gated, HasBias, kAct>(args, bias, col + 1, g1, u1));
        }
      }
    }
  }
}

// store_wgmma_acc_fixed for the launch's epilogue, chosen once a tile (with_fixed_epilogue). With
// the kind read per element (every activation's code inlined 64 times) Nsight Compute had
// fp8_tma's GEMM2 on qwen3-30b-a3b at 4096 tokens stalled 41% of its cycles on instruction fetch
// (H200, session 17).
template <typename T, bool Gated>
__device__ __forceinline__ void store_wgmma_acc(const float (&acc)[64], const Fp8GemmArgs& args,
                                                const grouped_gemm::TileWork& work, int n0,
                                                int row0) {
  grouped_gemm::with_fixed_epilogue<Gated>(
      args.act, args.epilogue, args.bias != nullptr, [&](auto has_bias, auto act) {
        store_wgmma_acc_fixed<T, Gated, decltype(has_bias)::value, decltype(act)::value>(
            acc, args, work, n0, row0);
      });
}

template <typename T, bool Gated>
__global__ void __launch_bounds__(Fp8WgmmaTile::kThreads, 1)
    fp8_gemm_wgmma_kernel(const Fp8GemmArgs args, int m_tiles_bound, int n_tiles) {
#ifdef MG_FP8_GEMM_WGMMA
  using grouped_gemm::wgmma_desc;
  constexpr int BM = Fp8WgmmaTile::BM, BK = Fp8WgmmaTile::BK, kStages = Fp8WgmmaTile::Stages;
  constexpr int BN = Gated ? Fp8WgmmaTile::BRows / 2 : Fp8WgmmaTile::BRows;  // output columns
  constexpr int kABytes = Fp8WgmmaTile::kABytes, kStageBytes = Fp8WgmmaTile::kStageBytes;
  constexpr int kBlocks = Fp8WgmmaTile::BRows / 8;  // 8-column accumulator blocks (gate + up)
  constexpr int kAhead = kStages - 1;
  extern __shared__ uint8_t smem_raw[];
  const uint32_t raw_base = grouped_gemm::smem_u32(smem_raw);
  const uint32_t smem_base = (raw_base + 1023u) & ~1023u;

  int m_tile, n_tile;
  grouped_gemm::tile_coords(m_tiles_bound, n_tiles, m_tile, n_tile);
  grouped_gemm::TileWork work;
  if (!grouped_gemm::find_tile<BM>(args.expert_offsets, static_cast<int>(args.num_experts), m_tile,
                                   work)) {
    return;
  }
  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid & 31, warp = tid >> 5;
  const int warpgroup = warp >> 2;
  const int n = static_cast<int>(args.n), k = static_cast<int>(args.k);
  const int64_t b_rows_per_expert = Gated ? 2 * args.n : args.n;
  const int rows_here = work.row_end - work.row_begin;
  const int n0 = n_tile * BN;
  const uint8_t* a = args.a + static_cast<int64_t>(work.row_begin) * k;
  const uint8_t* b = args.b + work.expert * b_rows_per_expert * k;

  // Accumulator layout: lane (g, t) of warp w of the warpgroup holds rows 16w + g (+8) and tile
  // weight rows 8j + 2t (+1) in acc[4j ..]; gated tiles hold gate rows in j < 8, up rows in j >= 8.
  const int row0 = warpgroup * 64 + (warp & 3) * 16 + (lane >> 2);
  const int k_blocks = (k + BK - 1) / BK;
  // Scales. Threads 0-127 copy the scale of tile weight row tid, threads 128-255 that of tile row
  // tid - 128, into the stage's scale area; rows and columns past the problem take a valid
  // neighbour's (their partial sums are zero and they are never stored).
  const int64_t block_n = args.b_scales.block_n, block_k = args.b_scales.block_k;
  // Activation scale columns: k_blocks, or 1 per token (then every block reads column 0).
  const int a_cols = static_cast<int>(fp8_act_scale_cols(k, args.a_per_token));
  const float* scale_src;
  if (tid < Fp8WgmmaTile::BRows) {
    const int64_t s_rows = (b_rows_per_expert + block_n - 1) / block_n;
    const int64_t s_cols = (args.k + block_k - 1) / block_k;
    const bool up = Gated && tid >= BN;
    const int col = min(n0 + (up ? tid - BN : tid), n - 1);
    scale_src =
        args.b_scales.scales + (work.expert * s_rows + (up ? n + col : col) / block_n) * s_cols;
  } else {
    const int row = min(tid - Fp8WgmmaTile::BRows, rows_here - 1);
    scale_src = args.a_scales + static_cast<int64_t>(work.row_begin + row) * a_cols;
  }
  constexpr int kScaleFloats = Fp8WgmmaTile::kScaleBytes / 4;
  const uint32_t scale_base = smem_base + kStages * kStageBytes;
  const float* scale_smem = reinterpret_cast<const float*>(smem_raw + (scale_base - raw_base));

  auto load = [&](int stage, int k_tile) {
    const uint32_t s_a = smem_base + stage * kStageBytes;
    load_stage<BM, BN, Fp8WgmmaTile::kThreads, Gated>(s_a, s_a + kABytes, a, b, rows_here, n0, n, k,
                                                      k_tile * BK, tid);
    const int64_t index = tid < Fp8WgmmaTile::BRows ? static_cast<int64_t>(k_tile) * BK / block_k
                                                    : (a_cols == 1 ? 0 : k_tile);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(
                     scale_base + stage * Fp8WgmmaTile::kScaleBytes + tid * 4),
                 "l"(scale_src + index));
  };

  float acc[64], part[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) {
    acc[i] = 0.0f;
    part[i] = 0.0f;
  }

#pragma unroll
  for (int s = 0; s < kAhead; ++s) {
    if (s < k_blocks) load(s, s);
    grouped_gemm::cp_async_commit();
  }
  for (int kb = 0; kb < k_blocks; ++kb) {
    grouped_gemm::cp_async_wait<kAhead - 1>();
    // cp.async wrote through the generic proxy; wgmma reads through the async proxy.
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    // Also: every warpgroup finished (waited for) its wgmmas on the stage loaded next.
    __syncthreads();
    const int next = kb + kAhead;
    if (next < k_blocks) load(next % kStages, next);
    grouped_gemm::cp_async_commit();

    const uint32_t s_a = smem_base + (kb % kStages) * kStageBytes + warpgroup * 64 * 128;
    const uint32_t s_b = smem_base + (kb % kStages) * kStageBytes + kABytes;
    grouped_gemm::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < BK / 32; ++kk) {
      wgmma_m64n128k32_e4m3(part, wgmma_desc(s_a + kk * 32), wgmma_desc(s_b + kk * 32), kk);
    }
    grouped_gemm::wgmma_commit();

    // The block's scales came with its tiles.
    const float* ws = scale_smem + (kb % kStages) * kScaleFloats;
    const float xs0 = ws[Fp8WgmmaTile::BRows + row0], xs1 = ws[Fp8WgmmaTile::BRows + row0 + 8];
    wgmma_wait64<0>(part);
#pragma unroll
    for (int j = 0; j < kBlocks; ++j) {
      const float2 w = *reinterpret_cast<const float2*>(ws + j * 8 + (lane & 3) * 2);
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        acc[4 * j + q] =
            fmaf(part[4 * j + q], (q < 2 ? xs0 : xs1) * ((q & 1) ? w.y : w.x), acc[4 * j + q]);
      }
    }
  }
  grouped_gemm::cp_async_wait<0>();

  store_wgmma_acc<T, Gated>(acc, args, work, n0, row0);
#endif  // MG_FP8_GEMM_WGMMA
}

template <typename T, bool Gated>
void launch_wgmma(const Fp8GemmArgs& args, cudaStream_t stream) {
  const std::string why =
      fp8_gemm_kernel_check(Fp8GemmKernel::kWgmma, grouped_gemm_sm90a_kernels());
  MG_CHECK(why.empty(), "FP8 grouped GEMM: {}", why);
  const int64_t m_bound = m_tiles_bound(args, Fp8WgmmaTile::BM);
  constexpr int kBN = Gated ? Fp8WgmmaTile::BRows / 2 : Fp8WgmmaTile::BRows;
  const int64_t n_tiles = (args.n + kBN - 1) / kBN;
  const int64_t blocks = m_bound * n_tiles;
  MG_CHECK(blocks <= INT32_MAX, "FP8 grouped GEMM: {} tiles exceed the grid", blocks);
  auto* kernel = fp8_gemm_wgmma_kernel<T, Gated>;
  MG_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     Fp8WgmmaTile::kSmemBytes));
  kernel<<<static_cast<unsigned>(blocks), Fp8WgmmaTile::kThreads, Fp8WgmmaTile::kSmemBytes,
           stream>>>(args, static_cast<int>(m_bound), static_cast<int>(n_tiles));
  MG_CUDA_CHECK_LAUNCH();
}

}  // namespace mg::cuda::fp8
