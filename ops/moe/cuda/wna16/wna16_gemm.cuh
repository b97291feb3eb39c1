// The WNA16 grouped GEMM: mma.sync m16n8k16 BF16/F16 with the B operand dequantized in registers
// from packed 4- or 8-bit codes (layout: wna16_experts_cuda.h, section 1). nvcc only; included by
// wna16_gemm_<dtype>_<int4|int8|mxfp4|nvfp4>.cu.
//
// One CTA computes BM rows of one expert × 64 output columns (a gated CTA streams 128 weight rows:
// gate rows n0.. and up rows part_rows + n0..), 4 warps side by side, each 16 columns (two n8
// blocks, and their two up blocks when gated) of all BM rows. A cp.async pipeline fills, per
// 128-wide K step, a stage of shared memory with
//   A   BM rows × 128 elements, as two [BM][64] halves of 128-byte rows XOR-swizzled by 16-byte
//       chunk (the BF16 mma kernel's layout and ldmatrix addressing)
//   B   the packed words of the CTA's 8-row blocks for this step, copied as they lie in memory
//   P   integer codes: per weight row, the {s, -z·s} pair of each 32-wide K unit's group (only
//       the units that start a group are copied; the others read the entry of their group's
//       first unit); FP4: the step's scale bytes of the CTA's 8-row blocks, as they lie in memory
//       (4 or 8 per row), decoded per unit in registers (E8M0: a shift into an F32 exponent;
//       E4M3: one cvt of both halves' bytes to half2)
// and each lane turns its own 16 (or 32) bytes of B into its mma fragments, by one of three
// paths (the decode kernels' three, wna16_decode_cuda.cuh):
//   exact (integer codes whose zero points are integer codes, Wna16Zeros::kIntegerCodes: GPTQ,
//     AWQ, compressed-tensors, symmetric): the exact q - z in T (INT4 one LOP3 a nibble pair under
//     a half2 magic and one HSUB2; INT8 a PRMT and an HSUB2, BF16 through F32), the mmas summing
//     U = Σ x (q - z) of one scale group in fp32 accumulators of their own, and the group's end
//     adding s · U to the outputs (one fma an element). No weight is rounded to T.
//   placed (FP4 codes whose scales T holds: BF16 MXFP4, NVFP4): the E2M1 bits placed into T
//     (fp4_placed_fragments: 15 bit instructions and 4 HMUL2 for 8 values, MXFP4's unbias folded
//     into its scale pair; NVFP4 8 HMUL2; exact).
//   per value (other integer codes, F16 MXFP4): one shift-and-or into a float whose low mantissa
//     bits are the code (2^23 + q), one subtraction (exact), one fma with the group's pair, and
//     half a conversion to a packed BF16/F16 pair: round_T(fma(q, s, -z·s)).
// The exact INT4 and placed paths pair nibbles j and j + 4, so both k16 halves of a unit's A are
// permuted to that k order after ldmatrix (permute_a, 8 PRMT a unit and m16 block).
// Rows, columns and K tails are zero-filled by cp.async, so the MMAs need no masks.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "framework/core/error.h"
#include "framework/device/cuda/cuda_check.h"
#include "framework/device/cuda/cuda_utils.cuh"
#include "ops/moe/cuda/grouped_gemm_common.cuh"
#include "ops/moe/cuda/moe_activation_cuda.cuh"
#include "ops/moe/cuda/wna16/wna16_exact_codes.h"
#include "ops/moe/cuda/wna16/wna16_experts_cuda.h"
#include "ops/moe/cuda/wna16/wna16_gemm_launch.h"

namespace mg::cuda::wna16 {

template <int BM_, int Stages_>
struct Wna16Tile {
  static constexpr int BM = BM_, BN = 64, BK = 128, Stages = Stages_;
  static constexpr int kWarpsN = 4, kThreads = kWarpsN * 32;
  static constexpr int MI = BM / 16;  // m16 blocks per warp (every warp covers all BM rows)
  static constexpr int NI = 2;        // n8 blocks per warp (16 columns)
  static constexpr int kABytes = BM * BK * 2;
  template <int Bits, Wna16Codes Codes, bool Gated>
  struct Stage {
    static constexpr int kBRows = Gated ? 2 * BN : BN;
    static constexpr int kBlocks = kBRows / 8;
    static constexpr int kWordsPerLane = Bits == 4 ? 4 : 8;
    static constexpr int kBBytes = kBlocks * 32 * kWordsPerLane * 4;
    // Scale bytes per row of a step (FP4), or 0: F32 pairs, 4 units x 8 bytes per row.
    static constexpr int kScaleBytes = static_cast<int>(wna16_scale_bytes_per_step(Codes));
    static constexpr int kPBytes = kScaleBytes == 0 ? kBRows * 4 * 8 : kBRows * kScaleBytes;
    static constexpr int kBytes = kABytes + kBBytes + kPBytes;
    static constexpr int kSmem = Stages * kBytes;
  };
};

// mma16: 4 stages (gated int4 64 KB, int8 96 KB); mma32: 4 stages (gated int4 80 KB, int8 112
// KB); mma64: 3 stages (gated int4 84 KB, int8 108 KB).
using Wna16Mma16Tile = Wna16Tile<16, 4>;
using Wna16Mma32Tile = Wna16Tile<32, 4>;
using Wna16Mma64Tile = Wna16Tile<64, 3>;

// 8 bytes global → shared through L1 (the groups' pairs are shared by the 4 units of a step and
// by neighbouring CTAs); zero-filled when !valid.
__device__ __forceinline__ void cp_async_8(uint32_t dst, const void* src, bool valid) {
  const int src_bytes = valid ? 8 : 0;
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(dst), "l"(src),
               "r"(src_bytes));
}

// Two values as the packed pair of an mma operand register (lo: the lower k).
template <typename T>
__device__ __forceinline__ uint32_t pack_pair(float lo, float hi) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  } else {
    const __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  }
}

// The code in bits [shift, shift + Bits) of `word` as an exact float: 2^23 + q reinterpreted,
// minus 2^23 (exact), so no int→float conversion (a quarter-rate instruction) is needed.
template <int Bits>
__device__ __forceinline__ float code_at(uint32_t word, int shift) {
  constexpr uint32_t kMask = (1u << Bits) - 1u;
  return __uint_as_float(((word >> shift) & kMask) | 0x4B000000u) - 8388608.0f;
}

// 2·|e2m1| of the magnitude codes 0..7, {0, 1, 2, 3, 4, 6, 8, 12}, as the bytes of two words.
inline constexpr uint32_t kE2M1DoubledLo = 0x03020100u, kE2M1DoubledHi = 0x0C080604u;

// 2·e2m1(code) for the E2M1 code in bits [shift, shift + 4) of `word`, exact: one byte permute
// picks the doubled magnitude (bytes 1..3 of the result are byte 0 of the table, 0), the 2^23
// trick makes it a float, and the code's bit 3 becomes the sign.
__device__ __forceinline__ float e2m1_doubled_at(uint32_t word, int shift) {
  const uint32_t c = word >> shift;
  const uint32_t mag = __byte_perm(kE2M1DoubledLo, kE2M1DoubledHi, c & 7u);
  const float v = __uint_as_float(mag | 0x4B000000u) - 8388608.0f;
  return __uint_as_float(__float_as_uint(v) | ((c & 8u) << 28));
}

// ---- FP4 codes placed bit for bit (wna16_exact::e2m1_placed_pairs), shared with the decode
// kernels (wna16_decode_cuda.cuh): a B register holds nibbles j and j + 4 of a unit (k and
// k + 16), so the A registers are permuted to match (permute_a).

// The A operands of the two k16 mmas of one unit in int4_magic_pairs' order (also
// e2m1_placed_pairs'), from the natural pairs lo[i] = row g's x[32 u + 2t + 8 i .. + 1] and hi[i]
// = row g + 8's: int4_magic_pairs gives b[m][r] = nibbles (2m + r, 2m + r + 4), i.e. k
// (2t + 8m + r, 16 + 2t + 8m + r), so mma m takes (x[2t + 8m], x[16 + 2t + 8m]) and
// (x[2t + 8m + 1], x[17 + 2t + 8m]) of both rows. One PRMT a register; the mma's sum over k does
// not see the order. kHi false: rows g + 8 are zeros (no PRMT).
template <bool kHi = true>
__device__ __forceinline__ void permute_a(const uint32_t (&lo)[4], const uint32_t (&hi)[4],
                                          uint32_t (&a)[2][4]) {
#pragma unroll
  for (int m = 0; m < 2; ++m) {
    a[m][0] = __byte_perm(lo[m], lo[m + 2], 0x5410);
    a[m][1] = kHi ? __byte_perm(hi[m], hi[m + 2], 0x5410) : 0u;
    a[m][2] = __byte_perm(lo[m], lo[m + 2], 0x7632);
    a[m][3] = kHi ? __byte_perm(hi[m], hi[m + 2], 0x7632) : 0u;
  }
}

// Packed pairs of T (BF16 / F16) as the 32-bit registers the mmas take, and back.
template <typename T>
using Pair2 = std::conditional_t<std::is_same_v<T, __nv_bfloat16>, __nv_bfloat162, __half2>;
template <typename T>
__device__ __forceinline__ Pair2<T> as_pair2(uint32_t bits) {
  Pair2<T> v;
  memcpy(&v, &bits, sizeof(v));
  return v;
}
template <typename T>
__device__ __forceinline__ uint32_t pair_bits(Pair2<T> v) {
  uint32_t bits;
  memcpy(&bits, &v, sizeof(bits));
  return bits;
}

// a * b and a - b on packed pairs of T (one HMUL2 / HSUB2; exact wherever these kernels use them:
// powers of two, products of at most 6 significant bits in T's range, differences of integers
// T holds).
template <typename T>
__device__ __forceinline__ uint32_t mul_pair(uint32_t a, uint32_t b) {
  return pair_bits<T>(__hmul2(as_pair2<T>(a), as_pair2<T>(b)));
}
template <typename T>
__device__ __forceinline__ uint32_t sub_pair(uint32_t a, uint32_t b) {
  return pair_bits<T>(__hsub2(as_pair2<T>(a), as_pair2<T>(b)));
}

// NVFP4: the E4M3 scales of both 16-wide halves of one unit (bytes 0 and 1 of `bytes`) as a pair
// of T, exact (F16: one cvt; BF16: bit placement and one HMUL2).
template <typename T>
__device__ __forceinline__ uint32_t e4m3_scale_pair(uint32_t bytes) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return mul_pair<T>(wna16_exact::e4m3_placed_pair_bf16(bytes), wna16_exact::kE4M3UnbiasBf16);
  } else {
    const __half2_raw h =
        __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(bytes & 0xFFFFu), __NV_E4M3);
    return static_cast<uint32_t>(h.x) | (static_cast<uint32_t>(h.y) << 16);
  }
}

// Whether FP4 B values of T can carry their scale exactly (fp4_placed_fragments): every E8M0 power
// of two is a BF16 value (BF16 has F32's exponent range), NVFP4's E4M3 scales are BF16 and F16
// values and 2·e2m1 · e4m3 has at most 6 significant bits; F16 holds few E8M0 powers.
template <typename T, Wna16Codes Codes>
inline constexpr bool kFp4ScaleInT = Codes == Wna16Codes::kNvfp4 ||
                                     (Codes == Wna16Codes::kMxfp4 &&
                                      std::is_same_v<T, __nv_bfloat16>);

// The scale pair of 32-wide unit `unit` of a row from its scale bytes of the step (MXFP4: byte
// `unit` of bytes.x, both halves, the E2M1 unbias folded in with `mx_bias` =
// wna16_exact::e8m0_unbias_bias of the matrix's shift; NVFP4: bytes 2 unit and 2 unit + 1, (half
// 0, half 1)).
template <typename T, Wna16Codes Codes>
__device__ __forceinline__ uint32_t fp4_scale_pair(uint2 bytes, int unit, uint32_t mx_bias) {
  if constexpr (Codes == Wna16Codes::kMxfp4) {
    return wna16_exact::e8m0_bf16_unbiased_pair(bytes.x, unit, mx_bias);
  } else {
    return e4m3_scale_pair<T>((unit < 2 ? bytes.x : bytes.y) >> (16 * (unit & 1)));
  }
}

// The B fragments b[m] (k16 mma m of the unit, A permuted by permute_a) of one lane's word of FP4
// codes with the row's scale pair applied, exact: MXFP4 one HMUL2 a register (the pair holds the
// unbias: w · 2^-shift), NVFP4 two (the placed values unbiased to 2·e2m1, the layout's 0.5 ·
// global, then scaled).
template <typename T, Wna16Codes Codes>
__device__ __forceinline__ void fp4_placed_fragments(uint32_t word, uint32_t scale_pair,
                                                     uint32_t (&b)[2][2]) {
  constexpr bool kBf16 = std::is_same_v<T, __nv_bfloat16>;
  static_assert(Codes != Wna16Codes::kMxfp4 || kBf16, "MXFP4 scales are placed in BF16 only");
  constexpr uint32_t kUnbias = wna16_exact::kE2M1Unbias<kBf16, Codes == Wna16Codes::kNvfp4>;
  wna16_exact::e2m1_placed_pairs<kBf16>(word, b);
#pragma unroll
  for (int m = 0; m < 2; ++m) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      if constexpr (Codes == Wna16Codes::kMxfp4) {
        b[m][r] = mul_pair<T>(b[m][r], scale_pair);
      } else {
        b[m][r] = mul_pair<T>(mul_pair<T>(b[m][r], kUnbias), scale_pair);
      }
    }
  }
}

// What the fp32 sums of FP4 codes placed in T (fp4_placed_fragments) are multiplied by, besides
// NVFP4's global / 2: 2^shift for MXFP4 (its B values are w · 2^-shift), 1 otherwise.
template <typename T, Wna16Codes Codes>
__device__ __forceinline__ float fp4_sum_scale(const Wna16Weights& w) {
  if constexpr (Codes == Wna16Codes::kMxfp4 && kFp4ScaleInT<T, Codes>) {
    return __int_as_float((127 + w.e8m0_shift) << 23);
  } else {
    return 1.0f;
  }
}

// The dequantization policy: the B fragment {b0, b1} of one k16 half from the lane's packed
// word(s) and its pair `sb` (wna16_experts_cuda.h, section 1).
template <int Bits, Wna16Codes Codes>
struct Dequant;

// Integer codes: 4 bits: nibbles 4h .. 4h + 3 of `word`; 8 bits: bytes 0 .. 3 of `word` (the
// caller picks word 2u + h); w = fma(q, s, -z·s).
template <int Bits>
struct Dequant<Bits, Wna16Codes::kInteger> {
  template <typename T>
  static __device__ __forceinline__ void fragment(uint32_t word, int half, float2 sb,
                                                  uint32_t (&b)[2]) {
    const int base = Bits == 4 ? 16 * half : 0;
    const float v0 = fmaf(code_at<Bits>(word, base + 0 * Bits), sb.x, sb.y);
    const float v1 = fmaf(code_at<Bits>(word, base + 1 * Bits), sb.x, sb.y);
    const float v2 = fmaf(code_at<Bits>(word, base + 2 * Bits), sb.x, sb.y);
    const float v3 = fmaf(code_at<Bits>(word, base + 3 * Bits), sb.x, sb.y);
    b[0] = pack_pair<T>(v0, v1);
    b[1] = pack_pair<T>(v2, v3);
  }
};

// 2^(code - 128) for an E8M0 code (0..254): the MXFP4 scale halved (the kernels decode 2·e2m1),
// the code shifted into the exponent field (codes 0 and 1 are the subnormals 2^-128, 2^-127).
__device__ __forceinline__ float e8m0_half_scale(uint32_t code) {
  return __uint_as_float(code >= 2u ? (code - 1u) << 23 : 0x00200000u << code);
}

// The two E4M3 codes in bytes 0 (.x) and 1 (.y) of `bytes` as floats (exact: one cvt to half2).
__device__ __forceinline__ float2 e4m3x2_to_float2(uint32_t bytes) {
  const __half2_raw h =
      __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(bytes & 0xFFFFu), __NV_E4M3);
  return __half22float2(__half2(h));
}

// The scales {half 0, half 1} of 32-wide unit `unit` from a row's scale bytes of the step (kMxfp4:
// byte `unit` of sb.x; kNvfp4: bytes 2 unit, 2 unit + 1 of the 8 in sb).
template <Wna16Codes Codes>
__device__ __forceinline__ float2 fp4_unit_scales(uint2 sb, int unit) {
  if constexpr (Codes == Wna16Codes::kMxfp4) {
    const float s = e8m0_half_scale((sb.x >> (8 * unit)) & 0xFFu);
    return make_float2(s, s);
  } else {
    const uint32_t word = unit < 2 ? sb.x : sb.y;
    return e4m3x2_to_float2(word >> (16 * (unit & 1)));
  }
}

// FP4 E2M1 codes: nibbles 4h .. 4h + 3 of `word`; w = 2·e2m1(q) · (h == 0 ? sb.x : sb.y) (the
// scales of the unit's two 16-column halves: fp4_unit_scales).
template <>
struct Dequant<4, Wna16Codes::kMxfp4> {
  template <typename T>
  static __device__ __forceinline__ void fragment(uint32_t word, int half, float2 sb,
                                                  uint32_t (&b)[2]) {
    const int base = 16 * half;
    const float s = half == 0 ? sb.x : sb.y;
    const float v0 = e2m1_doubled_at(word, base + 0) * s;
    const float v1 = e2m1_doubled_at(word, base + 4) * s;
    const float v2 = e2m1_doubled_at(word, base + 8) * s;
    const float v3 = e2m1_doubled_at(word, base + 12) * s;
    b[0] = pack_pair<T>(v0, v1);
    b[1] = pack_pair<T>(v2, v3);
  }
};

template <>
struct Dequant<4, Wna16Codes::kNvfp4> : Dequant<4, Wna16Codes::kMxfp4> {};

// The mmas of one 32-wide unit on the paths that pair nibbles j and j + 4 (exact INT4, placed FP4):
// per m16 block both k16 halves of its A (stage half at s_a, BM rows), permuted into that k order
// (permute_a), against the unit's B fragments b[ni][m] (gate) and b_up (when Gated) into c and
// c_up. One block's A is live at a time (the 64-row gated FP4 tile spilled at 253 registers with
// every block's A live).
template <typename T, int BM, bool Gated, int MI, int NI, int MU, int NU, int NB>
__device__ __forceinline__ void permuted_unit_mmas(uint32_t s_a, int unit, int a_row,
                                                   int a_half_chunk, const uint32_t (&b)[NI][2][2],
                                                   const uint32_t (&b_up)[NB][2][2],
                                                   float (&c)[MI][NI][4],
                                                   float (&c_up)[MU][NU][4]) {
  using grouped_gemm::ldmatrix_x4;
  using grouped_gemm::swizzled;
  constexpr int kUp = Gated ? 1 : 0;
#pragma unroll
  for (int mi = 0; mi < MI; ++mi) {
    uint32_t h0[4], h1[4], am[2][4];
    ldmatrix_x4(h0, s_a + (unit >> 1) * (BM * 128) +
                        swizzled(a_row + mi * 16, ((2 * unit) & 3) * 2 + a_half_chunk));
    ldmatrix_x4(h1, s_a + (unit >> 1) * (BM * 128) +
                        swizzled(a_row + mi * 16, ((2 * unit + 1) & 3) * 2 + a_half_chunk));
    // Row g's natural pairs (k 2t, 2t + 8, 16 + 2t, 24 + 2t) and row g + 8's.
    const uint32_t lo[4] = {h0[0], h0[2], h1[0], h1[2]};
    const uint32_t hi[4] = {h0[1], h0[3], h1[1], h1[3]};
    permute_a(lo, hi, am);
#pragma unroll
    for (int ni = 0; ni < NI; ++ni) {
#pragma unroll
      for (int m = 0; m < 2; ++m) {
        grouped_gemm::mma_16816<T>(c[mi][ni], am[m], b[ni][m]);
        if constexpr (Gated) {
          grouped_gemm::mma_16816<T>(c_up[kUp * mi][kUp * ni], am[m], b_up[kUp * ni][m]);
        }
      }
    }
  }
}

// The GEMM epilogue of one output (up only read when Gated); bias F32 [N_b] of the expert.
template <bool Gated>
__device__ __forceinline__ float epilogue_value(const Wna16GemmArgs& args, const float* bias,
                                                int col, float gate, float up) {
  if (bias != nullptr) gate += bias[col];
  if constexpr (Gated) {
    if (bias != nullptr) up += bias[args.n + col];
    return moe_activation(args.act, gate, up);
  } else {
    return args.epilogue == GroupedEpilogue::kActivation ? moe_activation(args.act, gate, 0.0f)
                                                         : gate;
  }
}

// Exact (integer codes whose zero points are integer codes, Wna16Zeros::kIntegerCodes): the exact
// q - z in T as B (wna16_exact_codes.h, as the decode kernels' warp_block_gemm_exact), summed per
// scale group in fp32 accumulators of their own and added to the outputs as s · U when the group
// ends; no weight is rounded to T.
template <typename T, int Bits, Wna16Codes Codes, class Tile, bool Gated, bool Exact>
__global__ void __launch_bounds__(Tile::kThreads)
    wna16_gemm_kernel(const Wna16GemmArgs args, int m_tiles_bound, int n_tiles) {
  using grouped_gemm::cp_async_16;
  using grouped_gemm::ldmatrix_x4;
  using grouped_gemm::swizzled;
  using S = typename Tile::template Stage<Bits, Codes, Gated>;
  constexpr bool kFp4 = Codes != Wna16Codes::kInteger;
  // FP4 codes placed bit for bit, scaled in T (fp4_placed_fragments), where T holds the scales.
  constexpr bool kPlaced = kFp4 && kFp4ScaleInT<T, Codes>;
  [[maybe_unused]] const uint32_t mx_bias = wna16_exact::e8m0_unbias_bias(args.b.e8m0_shift);
  static_assert(!Exact || Codes == Wna16Codes::kInteger, "the exact path is for integer codes");
  constexpr bool kBf16 = std::is_same_v<T, __nv_bfloat16>;
  constexpr int kScaleBytes = S::kScaleBytes;
  constexpr int BM = Tile::BM, BN = Tile::BN, BK = Tile::BK, kStages = Tile::Stages;
  constexpr int MI = Tile::MI, NI = Tile::NI, kThreads = Tile::kThreads;
  constexpr int kABytes = Tile::kABytes, kBBytes = S::kBBytes, kStageBytes = S::kBytes;
  constexpr int kBRows = S::kBRows, kW = S::kWordsPerLane;
  constexpr int kUp = Gated ? 1 : 0;  // sizes of the up-block arrays: 1 element when plain
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
  const int n = static_cast<int>(args.n), k = static_cast<int>(args.k);
  const int rows_here = work.row_end - work.row_begin;
  const int n0 = n_tile * BN;
  const int64_t part_rows = args.b.part_rows;
  const int64_t rows_padded = Gated ? 2 * part_rows : part_rows;
  const int k_steps = static_cast<int>(args.b.k_steps);
  const int groups = static_cast<int>(args.b.groups);
  const int group_size = static_cast<int>(args.b.group_size);
  // Units that share a group's pair: the largest of 4, 2, 1 units (128, 64, 32 columns) that
  // divides G (steps start at multiples of 128, and G is a multiple of 32 when there is more than
  // one group), so runs of that many units never straddle a group; only their first unit's pair
  // is copied.
  [[maybe_unused]] const int unit_group = groups == 1 || group_size % 128 == 0 ? 4
                                          : group_size % 64 == 0               ? 2
                                                                               : 1;
  // unit_group is a power of two, so a unit's run starts at unit & group_mask: a mask, where
  // `unit / unit_group * unit_group` compiled to an integer division per unit and step (Nsight
  // Compute's SASS counts on the H200, session 18).
  [[maybe_unused]] const int group_mask = ~(unit_group - 1);
  constexpr int kStepWords = 32 * kW;
  const uint32_t* words =
      args.b.words + work.expert * (rows_padded / 8) * static_cast<int64_t>(k_steps) * kStepWords;
  [[maybe_unused]] const float* params =
      kFp4 ? nullptr : args.b.params + work.expert * rows_padded * groups * 2;
  // FP4: the expert's scale bytes [row_blocks, k_steps, 8, kScaleBytes].
  [[maybe_unused]] const uint8_t* scale_bytes =
      kFp4 ? args.b.scale_bytes + work.expert * rows_padded * k_steps * kScaleBytes : nullptr;
  const uint32_t smem_base = grouped_gemm::smem_u32(smem);

  // A rows: thread tid copies chunk (tid & 15) of rows (tid >> 4) + 8 it; their source rows are
  // fixed, so they are found once (through row_to_pair: the gather).
  constexpr int kAIters = BM * 16 / kThreads;
  static_assert(BM * 16 % kThreads == 0, "A chunks split evenly over the threads");
  // Held as 32-bit row indices, not pointers: half the registers, which the 64-row gated tile
  // lacks (one 64-bit multiply-add a copy finds the address).
  int a_src_row[kAIters];
  const int a_chunk_id = tid & 15;
#pragma unroll
  for (int it = 0; it < kAIters; ++it) {
    const int row = (tid >> 4) + it * (kThreads / 16);
    const int r = min(row, rows_here - 1);  // rows past the tile: zero-filled, any valid source
    int src_row = work.row_begin + r;
    if (args.row_to_pair != nullptr) src_row = __ldg(args.row_to_pair + src_row) / args.top_k;
    a_src_row[it] = src_row;
  }
  const T* a_base = static_cast<const T*>(args.a);

  // The copies of a stage. What does not change over the K loop (each copy's source row, block
  // or params row, and whether it is valid) is a copy "plan"; the 16- and 32-row tiles find their
  // plans once, before the loop, where recomputing them cost ~150 instructions a stage and warp
  // (Nsight Compute's SASS counts of the 16-row tile, H200, session 18: ~25 a copy, with an
  // integer division per params copy). The 64-row tiles recompute them per stage with the code
  // they had before: their registers are spoken for (a_src_row says why), and calling the plan
  // lambdas per stage there changed their code (ptxas: the plain MXFP4 tile 128 -> 175
  // registers, the gated one 64 bytes of spill).
  constexpr bool kHoistPlans = BM <= 32;
  constexpr int kChunksPerBlock = kStepWords / 4;
  constexpr int kBChunks = S::kBlocks * kChunksPerBlock;
  constexpr int kBIters = (kBChunks + kThreads - 1) / kThreads;
  constexpr int kFp4PChunks = 8 * kScaleBytes / 16;  // FP4: 16-byte chunks of a block's step
  constexpr int kPIters = kFp4 ? 1 : kBRows * 4 / kThreads;
  static_assert(!kFp4 || S::kBlocks * kFp4PChunks <= kThreads, "one P chunk per thread at most");
  struct ACopy {
    const T* src;  // the row's chunk at step 0
    uint32_t dst;  // offset in the stage
    bool row_valid;
  };
  struct Copy {
    const void* src;  // at step 0 (integer params: the row's first pair)
    bool valid;       // false: zero-filled
    bool active;      // false: this thread makes no such copy
  };
  [[maybe_unused]] const auto a_plan = [&](int it) {
    const int row = (tid >> 4) + it * (kThreads / 16);
    return ACopy{
        a_base + static_cast<int64_t>(a_src_row[it]) * k + a_chunk_id * 8,
        static_cast<uint32_t>((a_chunk_id >> 3) * (BM * 128) + swizzled(row, a_chunk_id & 7)),
        row < rows_here};
  };
  // B: the CTA's 8-row blocks, each kStepWords contiguous words in memory and in the stage:
  // chunk i of the stage is 16-byte chunk i % kChunksPerBlock of block i / kChunksPerBlock.
  [[maybe_unused]] const auto b_plan = [&](int it) {
    const int i = tid + it * kThreads;
    const int block = i / kChunksPerBlock, chunk = i % kChunksPerBlock;
    const bool up = Gated && block >= BN / 8;
    const int col0 = n0 + (up ? block - BN / 8 : block) * 8;  // first output column
    const int64_t row_block = ((up ? part_rows : 0) + col0) / 8;
    return Copy{words + row_block * k_steps * kStepWords + chunk * 4, col0 < n,
                kBChunks % kThreads == 0 || i < kBChunks};
  };
  // P. FP4: the blocks' scale bytes of a step, 8 rows x kScaleBytes contiguous per block, in
  // block order (chunk i: 16-byte chunk i % kFp4PChunks of block i / kFp4PChunks). Integer
  // codes: entry (row, unit) of the stage at (row * 4 + unit) * 8 bytes, the unit's group's pair
  // (only for units that start a run of unit_group).
  [[maybe_unused]] const auto p_plan = [&](int it) {
    const int i = tid + it * kThreads;
    if constexpr (kFp4) {
      const int block = i / kFp4PChunks, chunk = i % kFp4PChunks;
      const bool up = Gated && block >= BN / 8;
      const int col0 = n0 + (up ? block - BN / 8 : block) * 8;
      const int64_t row_block = ((up ? part_rows : 0) + col0) / 8;
      return Copy{scale_bytes + row_block * k_steps * (8 * kScaleBytes) + chunk * 16, col0 < n,
                  i < S::kBlocks * kFp4PChunks};
    } else {
      const int row = i >> 2, unit = i & 3;
      const bool up = Gated && row >= BN;
      const int col = n0 + (up ? row - BN : row);
      return Copy{params + ((up ? part_rows : 0) + col) * groups * 2, col < n,
                  (unit & group_mask) == unit};
    }
  };
  [[maybe_unused]] ACopy a_plans[kHoistPlans ? kAIters : 1];
  [[maybe_unused]] Copy b_plans[kHoistPlans ? kBIters : 1];
  [[maybe_unused]] Copy p_plans[kHoistPlans ? kPIters : 1];
  if constexpr (kHoistPlans) {
#pragma unroll
    for (int it = 0; it < kAIters; ++it) a_plans[it] = a_plan(it);
#pragma unroll
    for (int it = 0; it < kBIters; ++it) b_plans[it] = b_plan(it);
#pragma unroll
    for (int it = 0; it < kPIters; ++it) p_plans[it] = p_plan(it);
  }
  // Integer codes: the group of (step, unit) is (4 step + unit) / (group_size / 32) (group_size
  // is a multiple of 32 when there are several groups), a shift when that is a power of two.
  [[maybe_unused]] const int units_per_g = groups == 1 ? 1 : group_size / 32;
  [[maybe_unused]] const bool units_pow2 = (units_per_g & (units_per_g - 1)) == 0;
  [[maybe_unused]] const int units_shift = __ffs(units_per_g) - 1;

  auto load = [&](int stage, int step) {
    const uint32_t s_a = smem_base + stage * kStageBytes;
    const uint32_t s_b = s_a + kABytes;
    const uint32_t s_p = s_b + kBBytes;
    const int k0 = step * BK;
    if constexpr (kHoistPlans) {
#pragma unroll
      for (int it = 0; it < kAIters; ++it) {
        const ACopy& c = a_plans[it];
        const bool valid = c.row_valid && k0 + a_chunk_id * 8 < k;
        cp_async_16(s_a + c.dst, valid ? c.src + k0 : a_base, valid);
      }
#pragma unroll
      for (int it = 0; it < kBIters; ++it) {
        const Copy& c = b_plans[it];
        if (!c.active) break;
        const uint32_t* src = static_cast<const uint32_t*>(c.src) + step * kStepWords;
        cp_async_16(s_b + (tid + it * kThreads) * 16, c.valid ? src : words, c.valid);
      }
#pragma unroll
      for (int it = 0; it < kPIters; ++it) {
        const Copy& c = p_plans[it];
        if (!c.active) continue;
        const int i = tid + it * kThreads;
        if constexpr (kFp4) {
          const uint8_t* src = static_cast<const uint8_t*>(c.src) + step * (8 * kScaleBytes);
          cp_async_16(s_p + i * 16, c.valid ? src : scale_bytes, c.valid);
        } else {
          const int unit = i & 3;
          const int q = 4 * step + unit;
          const int g =
              groups == 1 ? 0 : min(units_pow2 ? q >> units_shift : q / units_per_g, groups - 1);
          const float* src = static_cast<const float*>(c.src) + g * 2;
          cp_async_8(s_p + i * 8, c.valid ? src : params, c.valid);
        }
      }
    } else {  // the 64-row tiles: the same copies, their sources found per stage
#pragma unroll
      for (int it = 0; it < kAIters; ++it) {
        const int row = (tid >> 4) + it * (kThreads / 16);
        const int kc = k0 + a_chunk_id * 8;
        const bool valid = row < rows_here && kc < k;
        const uint32_t dst = s_a + (a_chunk_id >> 3) * (BM * 128) + swizzled(row, a_chunk_id & 7);
        const int src_row = valid ? a_src_row[it] : a_src_row[0];
        cp_async_16(dst, a_base + static_cast<int64_t>(src_row) * k + (valid ? kc : 0), valid);
      }
#pragma unroll
      for (int it = 0; it < kBIters; ++it) {
        const int i = tid + it * kThreads;
        if (kBChunks % kThreads != 0 && i >= kBChunks) break;
        const int block = i / kChunksPerBlock, chunk = i % kChunksPerBlock;
        const bool up = Gated && block >= BN / 8;
        const int col0 = n0 + (up ? block - BN / 8 : block) * 8;  // first output column
        const bool valid = col0 < n;
        const int64_t row_block = ((up ? part_rows : 0) + col0) / 8;
        const uint32_t* src = words + (row_block * k_steps + step) * kStepWords + chunk * 4;
        cp_async_16(s_b + i * 16, valid ? src : words, valid);
      }
      if constexpr (kFp4) {
        // P: the blocks' scale bytes of this step (p_plan's layout).
        const int i = tid;
        if (i < S::kBlocks * kFp4PChunks) {
          const int block = i / kFp4PChunks, chunk = i % kFp4PChunks;
          const bool up = Gated && block >= BN / 8;
          const int col0 = n0 + (up ? block - BN / 8 : block) * 8;
          const bool valid = col0 < n;
          const int64_t row_block = ((up ? part_rows : 0) + col0) / 8;
          const uint8_t* src =
              scale_bytes + (row_block * k_steps + step) * (8 * kScaleBytes) + chunk * 16;
          cp_async_16(s_p + i * 16, valid ? src : scale_bytes, valid);
        }
      } else {
        // P: entry (row, unit) of the stage at (row * 4 + unit) * 8 bytes.
#pragma unroll
        for (int it = 0; it < kBRows * 4 / kThreads; ++it) {
          const int i = tid + it * kThreads;
          const int row = i >> 2, unit = i & 3;
          if ((unit & group_mask) != unit) continue;
          const bool up = Gated && row >= BN;
          const int col = n0 + (up ? row - BN : row);
          const bool valid = col < n;
          const int g = min((k0 + 32 * unit) / group_size, groups - 1);
          const float* src = params + (((up ? part_rows : 0) + col) * groups + g) * 2;
          cp_async_8(s_p + i * 8, valid ? src : params, valid);
        }
      }
    }
  };

  float acc[MI][NI][4];
  float acc_up[Gated ? MI : 1][Gated ? NI : 1][4];
  // Exact: the current scale group's sums U (gate, up), added to acc as s · U when it ends.
  [[maybe_unused]] float grp[Exact ? MI : 1][Exact ? NI : 1][4];
  [[maybe_unused]] float grp_up[Exact && Gated ? MI : 1][Exact && Gated ? NI : 1][4];
#pragma unroll
  for (int mi = 0; mi < MI; ++mi) {
#pragma unroll
    for (int ni = 0; ni < NI; ++ni) {
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        acc[mi][ni][q] = 0.0f;
        if constexpr (Gated) acc_up[mi][ni][q] = 0.0f;
        if constexpr (Exact) grp[mi][ni][q] = 0.0f;
        if constexpr (Exact && Gated) grp_up[mi][ni][q] = 0.0f;
      }
    }
  }
  // Exact: units (32 columns) until the current group ends; K's last unit ends the last group
  // (channel-wise: the only end).
  [[maybe_unused]] const int units_per_group = groups == 1 ? INT_MAX : group_size / 32;
  [[maybe_unused]] int units_left = units_per_group;

#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < k_steps) load(s, s);
    grouped_gemm::cp_async_commit();
  }

  // ldmatrix lanes of A (x4): rows 0-15 at chunks (2kk, 2kk + 1), as the BF16 kernel.
  const int a_row = lane & 15;
  const int a_half_chunk = lane >> 4;
  const int g_row = lane >> 2;  // this lane's row within an n8 block

  for (int step = 0; step < k_steps; ++step) {
    grouped_gemm::cp_async_wait<kStages - 2>();
    __syncthreads();
    const int next = step + kStages - 1;
    if (next < k_steps) load(next % kStages, next);
    grouped_gemm::cp_async_commit();

    const uint32_t s_a = smem_base + (step % kStages) * kStageBytes;
    const uint8_t* stage_ptr = smem + (step % kStages) * kStageBytes;
    const uint32_t* s_b = reinterpret_cast<const uint32_t*>(stage_ptr + kABytes);
    [[maybe_unused]] const float2* s_p =
        reinterpret_cast<const float2*>(stage_ptr + kABytes + kBBytes);
    [[maybe_unused]] const uint8_t* s_pb = stage_ptr + kABytes + kBBytes;

    // This lane's words of its blocks (gate, and up when gated) for the whole step.
    uint32_t wg[NI][kW];
    uint32_t wu[Gated ? NI : 1][kW];
#pragma unroll
    for (int ni = 0; ni < NI; ++ni) {
      const int block = warp * NI + ni;
#pragma unroll
      for (int q = 0; q < kW / 4; ++q) {
        const uint4 v =
            *reinterpret_cast<const uint4*>(s_b + (block * (kW / 4) + q) * 128 + lane * 4);
        wg[ni][4 * q + 0] = v.x;
        wg[ni][4 * q + 1] = v.y;
        wg[ni][4 * q + 2] = v.z;
        wg[ni][4 * q + 3] = v.w;
        if constexpr (Gated) {
          const uint4 u = *reinterpret_cast<const uint4*>(
              s_b + ((BN / 8 + block) * (kW / 4) + q) * 128 + lane * 4);
          wu[ni][4 * q + 0] = u.x;
          wu[ni][4 * q + 1] = u.y;
          wu[ni][4 * q + 2] = u.z;
          wu[ni][4 * q + 3] = u.w;
        }
      }
    }

    // FP4: this lane's rows' scale bytes of the step (row r of the stage at r * kScaleBytes).
    [[maybe_unused]] uint2 bg[kFp4 ? NI : 1];
    [[maybe_unused]] uint2 bu[kFp4 && Gated ? NI : 1];
    if constexpr (kFp4) {
#pragma unroll
      for (int ni = 0; ni < NI; ++ni) {
        const int row = (warp * NI + ni) * 8 + g_row;
        const auto load_row = [&](int r) {
          if constexpr (kScaleBytes == 4) {
            return make_uint2(*reinterpret_cast<const uint32_t*>(s_pb + r * 4), 0u);
          } else {
            return *reinterpret_cast<const uint2*>(s_pb + r * 8);
          }
        };
        bg[ni] = load_row(row);
        if constexpr (Gated) bu[ni] = load_row(BN + row);
      }
    }

    // Exact: the lane's B row g of each block, its group's z (recovered from {s, -z·s}) as the
    // magic pair HSUB2 takes off (INT8 BF16: the F32 bits of 2^23 + z). Recovered once per run of
    // unit_group units (the units of one group's pair), not per unit: at groups of 128 once a step.
    [[maybe_unused]] uint32_t zg[Exact ? NI : 1], zu[Exact && Gated ? NI : 1];
#pragma unroll
    for (int unit = 0; unit < 4; ++unit) {
      if constexpr (Exact) {
        const int p_unit = unit & group_mask;
        constexpr bool kViaF32 = Bits == 8 && kBf16;
        if (p_unit == unit) {  // uniform over the CTA
          const auto zero_magic = [&](int row) {
            const float2 pair = s_p[row * 4 + p_unit];
            const uint32_t z = static_cast<uint32_t>(wna16_exact::zero_code(pair.x, pair.y));
            return kViaF32 ? (wna16_exact::kMagicF32 | z) : wna16_exact::zero_magic_pair<kBf16>(z);
          };
#pragma unroll
          for (int ni = 0; ni < NI; ++ni) {
            const int row = (warp * NI + ni) * 8 + g_row;
            zg[ni] = zero_magic(row);
            if constexpr (Gated) zu[ni] = zero_magic(BN + row);
          }
        }
        if constexpr (Bits == 4) {
          // INT4: both k16 halves' B of the unit (nibble pairs j, j + 4: the placed paths' k
          // order), then per m16 block its A permuted to match (permute_a).
          uint32_t bgf[NI][2][2];
          uint32_t buf[Gated ? NI : 1][2][2];
#pragma unroll
          for (int ni = 0; ni < NI; ++ni) {
            wna16_exact::int4_magic_pairs<kBf16>(wg[ni][unit], bgf[ni]);
            if constexpr (Gated) wna16_exact::int4_magic_pairs<kBf16>(wu[ni][unit], buf[ni]);
#pragma unroll
            for (int m = 0; m < 2; ++m) {
#pragma unroll
              for (int r = 0; r < 2; ++r) {
                bgf[ni][m][r] = sub_pair<T>(bgf[ni][m][r], zg[ni]);
                if constexpr (Gated) buf[ni][m][r] = sub_pair<T>(buf[ni][m][r], zu[kUp * ni]);
              }
            }
          }
          permuted_unit_mmas<T, BM, Gated>(s_a, unit, a_row, a_half_chunk, bgf, buf, grp, grp_up);
        } else {
          // INT8: word 2 unit + half holds the half's 4 codes in k order (the per-value path's).
          const auto exact_pairs = [&](uint32_t word, uint32_t zm, uint32_t(&b)[2]) {
            if constexpr (kViaF32) {
              const float zf = __uint_as_float(zm);
              float d[4];
#pragma unroll
              for (int i = 0; i < 4; ++i) {
                d[i] = __uint_as_float(wna16_exact::int8_magic_f32_bits(word, i)) - zf;
              }
              b[0] = pack_pair<T>(d[0], d[1]);
              b[1] = pack_pair<T>(d[2], d[3]);
            } else {
              b[0] = sub_pair<T>(wna16_exact::int8_magic_pair_f16(word, 0), zm);
              b[1] = sub_pair<T>(wna16_exact::int8_magic_pair_f16(word, 1), zm);
            }
          };
#pragma unroll
          for (int half = 0; half < 2; ++half) {
            const int kk = 2 * unit + half;
            uint32_t af[MI][4];
#pragma unroll
            for (int mi = 0; mi < MI; ++mi) {
              ldmatrix_x4(af[mi], s_a + (kk >> 2) * (BM * 128) +
                                      swizzled(a_row + mi * 16, (kk & 3) * 2 + a_half_chunk));
            }
#pragma unroll
            for (int ni = 0; ni < NI; ++ni) {
              uint32_t b[2];
              exact_pairs(wg[ni][kk], zg[ni], b);
#pragma unroll
              for (int mi = 0; mi < MI; ++mi) grouped_gemm::mma_16816<T>(grp[mi][ni], af[mi], b);
              if constexpr (Gated) {
                exact_pairs(wu[kUp * ni][kk], zu[kUp * ni], b);
#pragma unroll
                for (int mi = 0; mi < MI; ++mi) {
                  grouped_gemm::mma_16816<T>(grp_up[kUp * mi][kUp * ni], af[mi], b);
                }
              }
            }
          }
        }
        // The group ends (uniform over the CTA): C columns 2t, 2t + 1 of each block get s · U
        // with their weight rows' s.
        if (--units_left == 0 || (unit == 3 && step == k_steps - 1)) {
          units_left = units_per_group;
#pragma unroll
          for (int ni = 0; ni < NI; ++ni) {
            const int row = (warp * NI + ni) * 8 + 2 * (lane & 3);
            const float s0 = s_p[row * 4 + p_unit].x, s1 = s_p[(row + 1) * 4 + p_unit].x;
            [[maybe_unused]] float su0 = 0.0f, su1 = 0.0f;
            if constexpr (Gated) {
              su0 = s_p[(BN + row) * 4 + p_unit].x;
              su1 = s_p[(BN + row + 1) * 4 + p_unit].x;
            }
#pragma unroll
            for (int mi = 0; mi < MI; ++mi) {
#pragma unroll
              for (int q = 0; q < 4; ++q) {
                acc[mi][ni][q] = fmaf(q & 1 ? s1 : s0, grp[mi][ni][q], acc[mi][ni][q]);
                grp[mi][ni][q] = 0.0f;
                if constexpr (Gated) {
                  acc_up[mi][ni][q] =
                      fmaf(q & 1 ? su1 : su0, grp_up[kUp * mi][kUp * ni][q], acc_up[mi][ni][q]);
                  grp_up[kUp * mi][kUp * ni][q] = 0.0f;
                }
              }
            }
          }
        }
      } else if constexpr (kPlaced) {
        // The unit's B fragments first (gate and up, every n8 block: 8 registers a block), then
        // the mmas against each m16 block's permuted A (permuted_unit_mmas).
        uint32_t bgf[NI][2][2];
        uint32_t buf[Gated ? NI : 1][2][2];
#pragma unroll
        for (int ni = 0; ni < NI; ++ni) {
          fp4_placed_fragments<T, Codes>(wg[ni][unit],
                                         fp4_scale_pair<T, Codes>(bg[ni], unit, mx_bias), bgf[ni]);
          if constexpr (Gated) {
            fp4_placed_fragments<T, Codes>(
                wu[ni][unit], fp4_scale_pair<T, Codes>(bu[kUp * ni], unit, mx_bias), buf[ni]);
          }
        }
        permuted_unit_mmas<T, BM, Gated>(s_a, unit, a_row, a_half_chunk, bgf, buf, acc, acc_up);
      } else {  // per value
        float2 sg[NI];
        float2 su[Gated ? NI : 1];
#pragma unroll
        for (int ni = 0; ni < NI; ++ni) {
          if constexpr (kFp4) {
            sg[ni] = fp4_unit_scales<Codes>(bg[ni], unit);
            if constexpr (Gated) su[ni] = fp4_unit_scales<Codes>(bu[kUp * ni], unit);
          } else {
            const int row = (warp * NI + ni) * 8 + g_row;
            const int p_unit = unit & group_mask;
            sg[ni] = s_p[row * 4 + p_unit];
            if constexpr (Gated) su[ni] = s_p[(BN + row) * 4 + p_unit];
          }
        }
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int kk = 2 * unit + half;  // k16 index within the step
          uint32_t af[MI][4];
#pragma unroll
          for (int mi = 0; mi < MI; ++mi) {
            ldmatrix_x4(af[mi], s_a + (kk >> 2) * (BM * 128) +
                                    swizzled(a_row + mi * 16, (kk & 3) * 2 + a_half_chunk));
          }
#pragma unroll
          for (int ni = 0; ni < NI; ++ni) {
            uint32_t bf[2];
            const uint32_t word = Bits == 4 ? wg[ni][unit] : wg[ni][2 * unit + half];
            Dequant<Bits, Codes>::template fragment<T>(word, half, sg[ni], bf);
#pragma unroll
            for (int mi = 0; mi < MI; ++mi) grouped_gemm::mma_16816<T>(acc[mi][ni], af[mi], bf);
            if constexpr (Gated) {
              uint32_t bfu[2];
              const uint32_t uword = Bits == 4 ? wu[ni][unit] : wu[ni][2 * unit + half];
              Dequant<Bits, Codes>::template fragment<T>(uword, half, su[ni], bfu);
#pragma unroll
              for (int mi = 0; mi < MI; ++mi) {
                grouped_gemm::mma_16816<T>(acc_up[mi][ni], af[mi], bfu);
              }
            }
          }
        }
      }
    }
  }
  grouped_gemm::cp_async_wait<0>();

  // Epilogue straight from the accumulators: lane (g, t) holds rows g and g + 8, columns 2t and
  // 2t + 1 of each 16 × 8 block.
  // NVFP4: the accumulators hold sums of x · 2·e2m1 · e4m3; the part's global / 2 makes them real.
  // Placed MXFP4: sums of x · w · 2^-shift, made real by 2^shift (fp4_sum_scale).
  float gate_scale = fp4_sum_scale<T, Codes>(args.b), up_scale = gate_scale;
  if constexpr (Codes == Wna16Codes::kNvfp4) {
    const float* globals = args.b.globals + work.expert * (Gated ? 2 : 1);
    gate_scale = 0.5f * globals[0];
    if constexpr (Gated) up_scale = 0.5f * globals[1];
  }
  const auto real = [&](float a, [[maybe_unused]] float s) {
    if constexpr (kPlaced) {
      return a * s;
    } else {
      return a;
    }
  };
  const int64_t bias_rows = Gated ? 2 * args.n : args.n;
  const float* bias = args.bias == nullptr ? nullptr : args.bias + work.expert * bias_rows;
  T* c = static_cast<T*>(args.c) + static_cast<int64_t>(work.row_begin) * n;
  const bool pair_stores = (n & 1) == 0;
#pragma unroll
  for (int mi = 0; mi < MI; ++mi) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int row = mi * 16 + (lane >> 2) + half * 8;
      if (row >= rows_here) continue;
      T* c_row = c + static_cast<int64_t>(row) * n;
#pragma unroll
      for (int ni = 0; ni < NI; ++ni) {
        const int col = n0 + (warp * NI + ni) * 8 + (lane & 3) * 2;
        if (col >= n) continue;
        const float up0 = Gated ? real(acc_up[kUp * mi][kUp * ni][half * 2], up_scale) : 0.0f;
        const float up1 = Gated ? real(acc_up[kUp * mi][kUp * ni][half * 2 + 1], up_scale) : 0.0f;
        const float g0 = real(acc[mi][ni][half * 2], gate_scale);
        const float g1 = real(acc[mi][ni][half * 2 + 1], gate_scale);
        const float v0 = epilogue_value<Gated>(args, bias, col, g0, up0);
        if (pair_stores) {
          const float v1 = epilogue_value<Gated>(args, bias, col + 1, g1, up1);
          grouped_gemm::store_pair(c_row + col, v0, v1);
        } else {
          c_row[col] = from_float<T>(v0);
          if (col + 1 < n) {
            c_row[col + 1] = from_float<T>(epilogue_value<Gated>(args, bias, col + 1, g1, up1));
          }
        }
      }
    }
  }
}

// An upper bound of the m tiles: every expert's last tile may be partial, and at most
// min(E, rows) experts have rows.
inline int64_t m_tiles_bound(const Wna16GemmArgs& args, int bm) {
  return (args.max_rows + bm - 1) / bm + std::min(args.num_experts, args.max_rows);
}

template <typename T, int Bits, Wna16Codes Codes, class Tile, bool Gated, bool Exact>
void launch_tile(const Wna16GemmArgs& args, cudaStream_t stream) {
  const int64_t m_bound = m_tiles_bound(args, Tile::BM);
  const int64_t n_tiles = (args.n + Tile::BN - 1) / Tile::BN;
  const int64_t blocks = m_bound * n_tiles;
  MG_CHECK(blocks <= INT32_MAX, "WNA16 grouped GEMM: {} tiles exceed the grid", blocks);
  constexpr int kSmem = Tile::template Stage<Bits, Codes, Gated>::kSmem;
  auto* kernel = wna16_gemm_kernel<T, Bits, Codes, Tile, Gated, Exact>;
  // Above 48 KB a kernel must opt in; a host-side attribute, not a stream operation.
  MG_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  kernel<<<static_cast<unsigned>(blocks), Tile::kThreads, kSmem, stream>>>(
      args, static_cast<int>(m_bound), static_cast<int>(n_tiles));
  MG_CUDA_CHECK_LAUNCH();
}

template <typename T, int Bits, Wna16Codes Codes, bool Exact>
void launch_gemm(const Wna16GemmArgs& args, Wna16GemmKernel kernel, bool gated,
                 cudaStream_t stream) {
  switch (kernel) {
    case Wna16GemmKernel::kMma16:
      return gated ? launch_tile<T, Bits, Codes, Wna16Mma16Tile, true, Exact>(args, stream)
                   : launch_tile<T, Bits, Codes, Wna16Mma16Tile, false, Exact>(args, stream);
    case Wna16GemmKernel::kMma32:
      return gated ? launch_tile<T, Bits, Codes, Wna16Mma32Tile, true, Exact>(args, stream)
                   : launch_tile<T, Bits, Codes, Wna16Mma32Tile, false, Exact>(args, stream);
    case Wna16GemmKernel::kMma64:
      // No exact 64-row tile (wna16_gemm_exact says why): the caller takes the per-value one.
      if constexpr (!Exact) {
        return gated ? launch_tile<T, Bits, Codes, Wna16Mma64Tile, true, false>(args, stream)
                     : launch_tile<T, Bits, Codes, Wna16Mma64Tile, false, false>(args, stream);
      } else {
        MG_FAIL("WNA16 grouped GEMM: the exact path has no 64-row tile (wna16_gemm_exact)");
      }
    case Wna16GemmKernel::kWgmma:
      break;  // launch_wna16_grouped_gemm sends it to launch_wgmma_gemm
  }
  MG_FAIL("WNA16 grouped GEMM: unknown kernel {}", static_cast<int>(kernel));
}

}  // namespace mg::cuda::wna16
