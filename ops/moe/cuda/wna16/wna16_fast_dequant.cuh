// Cheap dequantization of the packed integer codes for the decode kernels (wna16_decode_cuda.cuh),
// beside the grouped GEMM's exact-fp32 `Dequant` policies (wna16_gemm.cuh), which it does not
// replace. nvcc only.
//
// The grouped GEMM turns every code into round_T(fma(q, s, -z·s)): ~4-5 instructions a value
// (extract, or-into-2^23, subtract, fma, half a conversion). The decode kernels are bound by
// instruction issue at that rate (INT4 at M = 1 streams two values a byte), so they take the group
// scale OUT of the inner loop instead:
//
//   Σ_k x_k (q_k - z) s  =  s · U + (-z·s - c·s) · X,    U = Σ_k x_k (q_k + c),  X = Σ_k x_k
//
// over the k of one scale group, where q + c is a value the tensor core takes exactly:
//   INT4, BF16  c = 128:  0x4300 | q is the BF16 128 + q (an exponent of 7, the nibble in the
//               mantissa's low bits; every integer up to 256 is exact in BF16);
//   INT4 / INT8, F16  c = 1024:  0x6400 | q is the F16 1024 + q (integers up to 2048 are exact);
//   INT8, BF16  c = -128:  q - 128 is exact in BF16 (|q - 128| <= 128 has at most 8 significant
//               bits) but 128 + q is not (above 256 the BF16 step is 2), so the byte goes through
//               F32: PRMT it under 0x4B000000 (the F32 2^23 + q), subtract 2^23 + 128 (exact) and
//               pack two values with one cvt (exact, the values are integers of 8 bits).
// The mma forms every product x · (q + c) exactly (BF16 x F16-width products fit F32's 24 bits)
// and accumulates in fp32, so U is Σ x (q + c) rounded only by the fp32 accumulation; X comes from
// a second mma of the same A against a B of ones (exact products, the same accumulation). The
// kernel keeps U and X per group (a unit of 32 columns, two, a step of 128, or the whole slice
// for channel-wise) in a separate fp32 accumulator and folds it into the output accumulator with
// two fmas per C element when the group ends.
//
// Rounding against the grouped GEMM: the weights are never rounded to T (the grouped GEMM rounds
// each dequantized weight to BF16 / F16 once); the products are exact and the sums fp32 in both,
// but the subtraction of c · X cancels: |c X| can be ~c / |q - z| times the result, so the fp32
// sums lose ~log2(c / 8) bits (INT4 BF16: ~4 of 24; F16: ~7) — still far below the one rounding
// of a weight to BF16 (8 bits) that the grouped GEMM does. The decode result therefore differs
// from the grouped GEMM's in the last bits of the fp32 sums and in the weights' rounding, not bit
// for bit; the tests compare both against the fp64 reference with the same tolerance.
//
// The INT4 fragments come in a permuted k order (see int4_fragments); the A fragments follow the
// same permutation (permute_a), which the mma's sum over k does not see.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

namespace mg::cuda::wna16_fast {

template <typename T>
inline constexpr bool kBf16 = std::is_same_v<T, __nv_bfloat16>;

// The offset c the B values carry (see above): the fragments hold q + c.
template <typename T, int Bits>
inline constexpr float kCodeOffset = !kBf16<T>   ? 1024.0f
                                     : Bits == 4 ? 128.0f
                                                 : -128.0f;

// A packed pair of ones of T (the B of the X mma).
template <typename T>
inline constexpr uint32_t kOnes = kBf16<T> ? 0x3F803F80u : 0x3C003C00u;

// INT4: the B fragments of both mmas of one 32-wide unit from the lane's word (nibble j holds
// k = 32 u + 16 (j / 4) + {2t, 2t + 1, 2t + 8, 2t + 9}[j % 4], wna16_experts_cuda.h section 1).
// Nibbles j and j + 4 sit 16 bits apart, so one mask (and one shift) puts a pair into the low
// bits of both halves of a register, under the magic exponent: b[m][r] = (q_{2m + r}, q_{2m + r
// + 4}) + c. The mma's logical k slots (b0: 2t, 2t + 1; b1: 2t + 8, 2t + 9) then hold
//   mma 0: b0 = nibbles (0, 4), b1 = (1, 5);   mma 1: b0 = (2, 6), b1 = (3, 7)
// i.e. k (2t, 16 + 2t), (2t + 1, 17 + 2t) and (2t + 8, 24 + 2t), (2t + 9, 25 + 2t): permute_a
// builds the A registers in that order. 4 LOP3 and 3 shifts for 8 values.
// (a & b) | c in one LOP3 (nvcc splits the C form into two when both b and c are constants).
__device__ __forceinline__ uint32_t and_or(uint32_t a, uint32_t b, uint32_t c) {
  uint32_t d;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}

template <typename T>
__device__ __forceinline__ void int4_fragments(uint32_t word, uint32_t (&b)[2][2]) {
  constexpr uint32_t kMask = 0x000F000Fu;
  constexpr uint32_t kMagic = kBf16<T> ? 0x43004300u : 0x64006400u;
  b[0][0] = and_or(word, kMask, kMagic);
  b[0][1] = and_or(word >> 4, kMask, kMagic);
  b[1][0] = and_or(word >> 8, kMask, kMagic);
  b[1][1] = and_or(word >> 12, kMask, kMagic);
}

// The A registers {a0, a2} of mma 0 and mma 1 of int4_fragments' order, from the row's natural
// pairs p[i] = x[32 u + 2t + 8 i .. + 1] (i = 0..3): mma 0 takes (x[2t], x[16 + 2t]) and
// (x[2t + 1], x[17 + 2t]), mma 1 the same 8 columns on. One PRMT a register.
__device__ __forceinline__ void permute_a(const uint32_t (&p)[4], uint32_t (&a)[2][2]) {
  a[0][0] = __byte_perm(p[0], p[2], 0x5410);
  a[0][1] = __byte_perm(p[0], p[2], 0x7632);
  a[1][0] = __byte_perm(p[1], p[3], 0x5410);
  a[1][1] = __byte_perm(p[1], p[3], 0x7632);
}

// INT8: the B fragment of one k16 half from its word (bytes 0..3: k 2t, 2t + 1, 2t + 8, 2t + 9,
// the natural order): q + c.
template <typename T>
__device__ __forceinline__ void int8_fragment(uint32_t word, uint32_t (&b)[2]) {
  if constexpr (kBf16<T>) {
    // Byte i under the F32 exponent of 2^23: selector (i, 4, 5, 7) over {word, 0x4B000000}.
    constexpr uint32_t kExp = 0x4B000000u;
    constexpr float kBias = 8388608.0f + 128.0f;  // 2^23 + 128, exact in F32
    const float v0 = __uint_as_float(__byte_perm(word, kExp, 0x7540)) - kBias;
    const float v1 = __uint_as_float(__byte_perm(word, kExp, 0x7541)) - kBias;
    const float v2 = __uint_as_float(__byte_perm(word, kExp, 0x7542)) - kBias;
    const float v3 = __uint_as_float(__byte_perm(word, kExp, 0x7543)) - kBias;
    const __nv_bfloat162 lo = __floats2bfloat162_rn(v0, v1);
    const __nv_bfloat162 hi = __floats2bfloat162_rn(v2, v3);
    b[0] = *reinterpret_cast<const uint32_t*>(&lo);
    b[1] = *reinterpret_cast<const uint32_t*>(&hi);
  } else {
    // Bytes (0, 1) and (2, 3) under 0x64: the F16 1024 + q, one PRMT a register.
    constexpr uint32_t kMagic = 0x64646464u;
    b[0] = __byte_perm(word, kMagic, 0x4140);
    b[1] = __byte_perm(word, kMagic, 0x4342);
  }
}

// MXFP4: the B fragments of one unit in int4_fragments' order, as the exact E2M1 values in T.
// An E2M1 code (sign, two exponent bits e, one mantissa bit m) is placed bit for bit into T with
// a zero exponent bias: the magnitude bits (e, m) become the lowest exponent bits and the top
// mantissa bit (BF16 bits 6..8, F16 bits 9..11), the sign bit 15. That is the T value
// e2m1 · 2^-126 (BF16) / 2^-14 (F16) for every code, e = 0 included (a subnormal of T: m / 2
// times the smallest normal), and one HMUL2 by 2^126 / 2^14 makes it the exact normal e2m1 (the
// tensor cores then see no subnormal). 7 shifts, 8 LOP3 and 4 HMUL2 for 8 values; the E8M0 scale
// (a power of two) multiplies the fp32 accumulator per unit (exact but for the product's one
// rounding), so the weights are never rounded.
template <typename T>
__device__ __forceinline__ void e2m1_fragments(uint32_t word, uint32_t (&b)[2][2]) {
  constexpr int kMagShift = kBf16<T> ? 6 : 9;  // code bit 0 (m) -> T bit kMagShift
  constexpr uint32_t kMag = kBf16<T> ? 0x01C001C0u : 0x0E000E00u;
  constexpr uint32_t kSign = 0x80008000u;
  // 2^126 (BF16 0x7E80) or 2^14 (F16 0x7400), both halves.
  constexpr uint32_t kUnbias = kBf16<T> ? 0x7E807E80u : 0x74007400u;
#pragma unroll
  for (int j = 0; j < 4; ++j) {  // nibbles j and j + 4: b[j / 2][j % 2]
    const int mag_shift = kMagShift - 4 * j, sign_shift = 12 - 4 * j;
    const uint32_t mag = mag_shift >= 0 ? word << mag_shift : word >> -mag_shift;
    const uint32_t sign = word << sign_shift;
    const uint32_t bits = and_or(sign, kSign, mag & kMag);
    uint32_t v;
    if constexpr (kBf16<T>) {
      const __nv_bfloat162 r = __hmul2(*reinterpret_cast<const __nv_bfloat162*>(&bits),
                                       *reinterpret_cast<const __nv_bfloat162*>(&kUnbias));
      v = *reinterpret_cast<const uint32_t*>(&r);
    } else {
      const __half2 r = __hmul2(*reinterpret_cast<const __half2*>(&bits),
                                *reinterpret_cast<const __half2*>(&kUnbias));
      v = *reinterpret_cast<const uint32_t*>(&r);
    }
    b[j / 2][j % 2] = v;
  }
}

// 2^(code - 127) for the E8M0 code in byte `unit` of `bytes`, as F32: the byte shifted into the
// exponent field (two instructions). Code 0 (2^-127, an F32 subnormal) reads as 0: it scales
// weights of at most 6 · 2^-127 (~1e-38), which no BF16 / F16 activation product can tell from 0.
__device__ __forceinline__ float e8m0_scale(uint32_t bytes, int unit) {
  const int shift = 23 - 8 * unit;  // byte `unit` -> bits 23..30
  const uint32_t bits = shift >= 0 ? bytes << shift : bytes >> -shift;
  return __uint_as_float(bits & 0x7F800000u);
}

}  // namespace mg::cuda::wna16_fast
