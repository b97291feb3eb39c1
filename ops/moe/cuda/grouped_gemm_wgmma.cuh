// The wgmma (sm_90a) grouped GEMM kernel for the large tiles (BF16 / F16).
//
// A CTA computes 128 rows × 256 weight rows (gated: 128 gate + 128 up rows → 128 output columns;
// plain: 256 output columns) with two warpgroups, each issuing m64n256k16 on its 64 rows. Operands
// come from the same cp.async pipeline as the mma.sync kernel: its [rows][64] tiles with 16-byte
// chunks XOR-swizzled by (row & 7) are exactly wgmma's 128-byte-swizzle K-major layout, so the
// descriptors point straight at them (stage bases 1024-byte aligned, k16 steps +32 bytes).
//
// wgmma needs sm_90a. The sm_90 (non-a) compile of this file keeps the kernel's symbol with an
// empty body; the host tells the two apart by the register count of the loaded cubin
// (wgmma_available) and then falls back to the mma.sync large tile.
#pragma once

#include <type_traits>

#include "ops/moe/cuda/grouped_gemm_common.cuh"

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define MG_GROUPED_GEMM_WGMMA 1
#endif

namespace mg::cuda {
namespace grouped_gemm {

struct WgmmaTile {
  static constexpr int BM = 128, BRows = 256, BK = 64, Stages = 4, kThreads = 256;
  static constexpr int kABytes = BM * BK * 2;
  static constexpr int kStageBytes = (BM + BRows) * BK * 2;
  // + 1024 to align the dynamic shared memory base to the 1024-byte swizzle atom.
  static constexpr int kSmemBytes = Stages * kStageBytes + 1024;
};

// The epilogue's function, fixed at compile time where speed matters: kNoAct is c = acc (+ bias)
// (GEMM2), a MoEActKind value that activation, kAnyAct the launch's kind read at run time.
inline constexpr int kNoAct = -2, kAnyAct = -1;

// Calls store(has_bias, act) once, with std::bool_constant and std::integral_constant<int>
// arguments for the launch's epilogue: kNoAct for GEMM2 (kBias), SiLU-gated and SwiGLU-OAI as
// themselves, any other activation as kAnyAct. A wgmma tile stores 64-128 values a thread, so the
// activation is chosen once a tile instead of switched on for each value (every kind's code
// inlined per value stalled the FP8 GEMM2 on instruction fetch: docs/performance.md, session 17).
template <bool Gated, class Store>
__device__ __forceinline__ void with_fixed_epilogue(const MoEActParams& act,
                                                    GroupedEpilogue epilogue, bool has_bias,
                                                    Store&& store) {
  const auto with_bias = [&](auto kind) {
    if (has_bias) return store(std::true_type{}, kind);
    return store(std::false_type{}, kind);
  };
  if constexpr (Gated) {
    if (act.kind == MoEActKind::kSiluGated) {
      return with_bias(std::integral_constant<int, static_cast<int>(MoEActKind::kSiluGated)>{});
    }
    if (act.kind == MoEActKind::kSwigluOai) {
      return with_bias(std::integral_constant<int, static_cast<int>(MoEActKind::kSwigluOai)>{});
    }
    return with_bias(std::integral_constant<int, kAnyAct>{});
  } else {
    if (epilogue == GroupedEpilogue::kBias) return with_bias(std::integral_constant<int, kNoAct>{});
    return with_bias(std::integral_constant<int, kAnyAct>{});
  }
}

#ifdef MG_GROUPED_GEMM_WGMMA

// K-major operand descriptor, 128-byte swizzle: 8-row groups 1024 bytes apart (SBO); LBO unused.
__device__ __forceinline__ uint64_t wgmma_desc(uint32_t smem_addr) {
  uint64_t desc = (smem_addr & 0x3FFFF) >> 4;
  desc |= static_cast<uint64_t>(1) << 16;
  desc |= static_cast<uint64_t>(1024 >> 4) << 32;
  desc |= static_cast<uint64_t>(1) << 62;
  return desc;
}

// The wgmma m64n256k16 instruction for element type TYPE ("bf16" or "f16"): the PTX string must
// be a literal, so the two instantiations differ only in this argument.
#define MG_WGMMA_M64N256K16(TYPE)                                                                  \
  asm volatile(                                                                                    \
      "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"                                                   \
      "wgmma.mma_async.sync.aligned.m64n256k16.f32." TYPE "." TYPE                                 \
      " {"                                                                                         \
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, " \
      "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, " \
      "%38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, " \
      "%56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, " \
      "%74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, " \
      "%92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, "   \
      "%108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, " \
      "%123, %124, %125, %126, %127"                                                               \
      "}, %128, %129, p, 1, 1, 0, 0;\n}\n"                                                         \
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),        \
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),    \
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), \
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), \
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), \
        "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), \
        "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), \
        "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), \
        "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), \
        "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), \
        "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), \
        "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), \
        "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), \
        "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),          \
        "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]),        \
        "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]),        \
        "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]),        \
        "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])         \
      : "l"(desc_a), "l"(desc_b))

// D[64 × 256] += A[64 × 16] · B[256 × 16]ᵀ, both K-major in shared memory (descriptors).
template <typename T>
__device__ __forceinline__ void wgmma_m64n256k16(float (&d)[128], uint64_t desc_a,
                                                 uint64_t desc_b) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    MG_WGMMA_M64N256K16("bf16");
  } else {
    MG_WGMMA_M64N256K16("f16");
  }
}

#undef MG_WGMMA_M64N256K16

__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void wgmma_wait(float (&d)[128]) {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
  // Ties the accumulators to the wait so the compiler does not read them earlier.
#pragma unroll
  for (int i = 0; i < 128; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

template <typename T, bool Gated, bool HasBias, int kAct>
__device__ __forceinline__ float wgmma_epilogue_value(const GroupedGemmArgs& args, const T* bias,
                                                      int col, float g, float u) {
  if constexpr (HasBias) {
    g += to_float(bias[col]);
    if constexpr (Gated) u += to_float(bias[args.n + col]);
  }
  if constexpr (kAct == kNoAct) {
    return g;
  } else {
    MoEActParams act = args.act;
    if constexpr (kAct != kAnyAct) act.kind = static_cast<MoEActKind>(kAct);
    return moe_activation(act, g, Gated ? u : 0.0f);
  }
}

// The epilogue of one warpgroup's m64 × 256 accumulators, stored to the tile's rows of c.
// Accumulator layout: lane (g, t) of warp w of the warpgroup holds rows 16w + g (+8) and columns
// 8j + 2t (+1) in acc[4j ..]; gated tiles hold gate columns in j < 16 and the matching up columns
// in j + 16. row0: this lane's first row in the tile (the warpgroup's first row + 16w + g); rows
// at or past the tile's rows and columns at or past N are not stored.
template <typename T, bool Gated, bool HasBias, int kAct>
__device__ __forceinline__ void store_wgmma_acc(const float (&acc)[128],
                                                const GroupedGemmArgs& args, const TileWork& work,
                                                int n0, int row0) {
  constexpr int kBlocks = Gated ? 16 : 32;  // 8-column blocks of output
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int n = static_cast<int>(args.n);
  const int64_t b_rows_per_expert = Gated ? 2 * args.n : args.n;
  const int rows_here = work.row_end - work.row_begin;
  const T* bias =
      HasBias ? static_cast<const T*>(args.bias) + work.expert * b_rows_per_expert : nullptr;
  T* c = static_cast<T*>(args.c) + static_cast<int64_t>(work.row_begin) * n;
  const bool pair_stores = (n & 1) == 0;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int row = row0 + half * 8;
    if (row >= rows_here) continue;
    T* c_row = c + static_cast<int64_t>(row) * n;
#pragma unroll
    for (int j = 0; j < kBlocks; ++j) {
      const int col = n0 + j * 8 + (lane & 3) * 2;
      if (col >= n) continue;
      const float g0 = acc[j * 4 + half * 2], g1 = acc[j * 4 + half * 2 + 1];
      const float u0 = Gated ? acc[(Gated ? j + kBlocks : j) * 4 + half * 2] : 0.0f;
      const float u1 = Gated ? acc[(Gated ? j + kBlocks : j) * 4 + half * 2 + 1] : 0.0f;
      const float v0 = wgmma_epilogue_value<T, Gated, HasBias, kAct>(args, bias, col, g0, u0);
      if (pair_stores) {
        store_pair(c_row + col, v0,
                   wgmma_epilogue_value<T, Gated, HasBias, kAct>(args, bias, col + 1, g1, u1));
      } else {
        c_row[col] = from_float<T>(v0);
        if (col + 1 < n) {
          c_row[col + 1] = from_float<T>(
              wgmma_epilogue_value<T, Gated, HasBias, kAct>(args, bias, col + 1, g1, u1));
        }
      }
    }
  }
}

// The store for the launch's epilogue (with_fixed_epilogue): bias or not, and the common
// functions (GEMM2's bias only, SiLU-gated, SwiGLU-OAI) with the activation fixed at compile time;
// other activations switch on the kind per element.
template <typename T, bool Gated>
__device__ __forceinline__ void store_wgmma_tile(const float (&acc)[128],
                                                 const GroupedGemmArgs& args, const TileWork& work,
                                                 int n0, int row0) {
  with_fixed_epilogue<Gated>(
      args.act, args.epilogue, args.bias != nullptr, [&](auto has_bias, auto act) {
        store_wgmma_acc<T, Gated, decltype(has_bias)::value, decltype(act)::value>(acc, args, work,
                                                                                   n0, row0);
      });
}

#endif  // MG_GROUPED_GEMM_WGMMA

template <typename T, bool Gated>
__global__ void __launch_bounds__(WgmmaTile::kThreads, 1)
    grouped_gemm_wgmma_kernel(const GroupedGemmArgs args, int m_tiles_bound, int n_tiles) {
#ifdef MG_GROUPED_GEMM_WGMMA
  // wgmma groups left running across the next barrier: with one, tensor cores never wait for the
  // barrier and loads run Stages - 2 tiles ahead.
  constexpr int InFlight = 1;
  constexpr int BM = WgmmaTile::BM, BK = WgmmaTile::BK, kStages = WgmmaTile::Stages;
  constexpr int BN = Gated ? WgmmaTile::BRows / 2 : WgmmaTile::BRows;  // output columns
  constexpr int kABytes = WgmmaTile::kABytes, kStageBytes = WgmmaTile::kStageBytes;
  extern __shared__ uint8_t smem_raw[];
  const uint32_t smem_base = (smem_u32(smem_raw) + 1023u) & ~1023u;

  int m_tile, n_tile;
  tile_coords(m_tiles_bound, n_tiles, m_tile, n_tile);
  TileWork work;
  if (!find_tile<BM>(args.expert_offsets, static_cast<int>(args.num_experts), m_tile, work)) {
    return;
  }
  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid & 31, warp = tid >> 5;
  const int warpgroup = warp >> 2;
  const int n = static_cast<int>(args.n), k = static_cast<int>(args.k);
  const int64_t b_rows_per_expert = Gated ? 2 * args.n : args.n;
  const int rows_here = work.row_end - work.row_begin;
  const int n0 = n_tile * BN;
  const T* a = static_cast<const T*>(args.a) + static_cast<int64_t>(work.row_begin) * k;
  const T* b = static_cast<const T*>(args.b) + work.expert * b_rows_per_expert * k;

  auto load_stage = [&](int stage, int k_tile) {
    const uint32_t s_a = smem_base + stage * kStageBytes;
    load_tile_stage<T, BM, BN, WgmmaTile::kThreads, Gated>(s_a, s_a + kABytes, a, b, rows_here, n0,
                                                           n, k, k_tile * BK, tid);
  };

  float acc[128];
#pragma unroll
  for (int i = 0; i < 128; ++i) acc[i] = 0.0f;

  // Loads run kAhead tiles ahead: the stage a load overwrites was last read by the wgmma group
  // of iteration kt - 1 - InFlight, which every warpgroup has waited for (wait_group InFlight)
  // before the barrier of this iteration.
  constexpr int kAhead = kStages - 1 - InFlight;
  const int k_tiles = (k + BK - 1) / BK;
#pragma unroll
  for (int s = 0; s < kAhead; ++s) {
    if (s < k_tiles) load_stage(s, s);
    cp_async_commit();
  }
  for (int kt = 0; kt < k_tiles; ++kt) {
    cp_async_wait<kAhead - 1>();
    // cp.async wrote through the generic proxy; wgmma reads through the async proxy.
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    __syncthreads();
    const int next = kt + kAhead;
    if (next < k_tiles) load_stage(next % kStages, next);
    cp_async_commit();

    const uint32_t s_a = smem_base + (kt % kStages) * kStageBytes + warpgroup * 64 * 128;
    const uint32_t s_b = smem_base + (kt % kStages) * kStageBytes + kABytes;
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < BK / 16; ++kk) {
      wgmma_m64n256k16<T>(acc, wgmma_desc(s_a + kk * 32), wgmma_desc(s_b + kk * 32));
    }
    wgmma_commit();
    wgmma_wait<InFlight>(acc);
  }
  wgmma_wait<0>(acc);
  cp_async_wait<0>();

  store_wgmma_tile<T, Gated>(acc, args, work, n0, warpgroup * 64 + (warp & 3) * 16 + (lane >> 2));
#endif  // MG_GROUPED_GEMM_WGMMA
}

}  // namespace grouped_gemm
}  // namespace mg::cuda
