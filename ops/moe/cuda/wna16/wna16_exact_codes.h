// The exact B values of the WNA16 decode kernels' integer-code path (wna16_decode_cuda.cuh,
// warp_block_gemm_exact): bit recipes shared by the device code and the CPU test that checks them
// (tests/unit/wna16_exact_codes_test.cc). Compiles on the host and in .cu files.
//
// Why: the grouped GEMM's per-value dequantization (round_T(fma(q, s, -z·s)): ~4-5 instructions a
// value) leaves the decode kernels bound by instruction issue at M = 1. When every zero point of a
// matrix is an integer code (symmetric: z = 8 / 128; uint zero points; Wna16Zeros::kIntegerCodes,
// detected on the host by wna16_zero_kind), the kernels instead feed the tensor cores the integer
// q - z itself, which T holds exactly (|q - z| <= 255 needs at most 8 significant bits; BF16 has 8,
// F16 11), accumulate U = Σ_k x_k (q_k - z) of one scale group in its own fp32 accumulator, and
// apply the group's scale once: acc += s · U. Every product x (q - z) is exact in fp32 (8 x 8
// significant bits), so U carries only the fp32 accumulation's rounding of the dot product itself:
// no term is formed that the sum must cancel again.
//
// An earlier attempt (db2fffc, reverted) fed q + 128 and subtracted (z + 128) · Σx per group: U
// and (z + 128) Σx are each up to ~16x (INT4 BF16; F16 ~128x) the result, which costs that many
// bits of the tensor core's fp32 accumulation. Its H100 failures (single elements far off) were
// blamed on that; this path's first H100 run failed the same way with no such term, and a host
// emulation showed why: the weights here (and there) are never rounded to T, the decode test's
// reference rounded them as the per-value path does, and in BF16 that rounding moves single
// outputs past the test's per-element bound (the H100 values are the unrounded weights' result
// bit for bit). The test now takes the unrounded weights for this path.
//
// How q - z is made, per pair of values (the halves of one 32-bit register):
//   INT4  nibbles j and j + 4 of the lane's word sit 16 bits apart: (word >> 4i) & 0x000F000F
//         or'ed under the half2 magic 0x4300 (BF16 2^7 = 128) / 0x6400 (F16 2^10 = 1024) is the
//         exact pair (128 + q_j, 128 + q_j+4) (one LOP3, one shift shared by the nibble pair);
//         one HSUB2 of the pair (128 + z, 128 + z) gives (q - z) exactly (both operands and the
//         result are integers of at most 8 bits in T's precision: no rounding);
//   INT8  F16: one PRMT puts bytes (b, b + 1) under 0x64 (the pair 1024 + q, exact below 2048) and
//         one HSUB2 of 1024 + z; BF16 (7 mantissa bits cannot hold a byte): PRMT the byte under the
//         F32 2^23 (0x4B000000 | q = 2^23 + q), one FADD of -(2^23 + z) (exact: both are integers
//         below 2^24) and one cvt.rn.bf16x2 per pair (exact: |q - z| <= 255).
// z itself comes from the pair {s, -z·s} the layout stores (wna16_experts_cuda.h, section 1):
// z = rint(-(-z·s) · rcp(s)). -z·s is z·s rounded once to F32 (relative error <= 2^-24), the
// approximate reciprocal is within 1 ulp for normal s and the product adds half an ulp, so the
// result is within 255 · 2^-21 < 1/8 of the integer z; wna16_zero_kind accepts a matrix only when
// every scale is in [2^-100, 2^100] (every product normal) or 0 (whose weights are 0 for any z).
#pragma once

#include <math.h>

#include <cstdint>

#include "framework/device/host_device.h"

namespace mg::cuda::wna16_exact {

// The bits of T's 2^7 (BF16) or 2^10 (F16): an integer c < 2^7 (2^10) or'ed into the low mantissa
// bits is the value 2^7 + c (2^10 + c) exactly.
template <bool kBf16>
inline constexpr uint32_t kMagicHalf = kBf16 ? 0x4300u : 0x6400u;

// The F32 bits of 2^23: an integer c < 2^23 or'ed into the mantissa is 2^23 + c exactly.
inline constexpr uint32_t kMagicF32 = 0x4B000000u;

// (a & b) | c in one LOP3 (nvcc splits the C form into two when both b and c are constants).
MG_HOST_DEVICE inline uint32_t and_or(uint32_t a, uint32_t b, uint32_t c) {
#ifdef __CUDA_ARCH__
  uint32_t d;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
#else
  return (a & b) | c;
#endif
}

// __byte_perm on the host (the selector's low 3 bits of each nibble pick a byte of {b, a}:
// 0..3 from a, 4..7 from b).
MG_HOST_DEVICE inline uint32_t byte_perm(uint32_t a, uint32_t b, uint32_t selector) {
#ifdef __CUDA_ARCH__
  return __byte_perm(a, b, selector);
#else
  const uint64_t bytes = (static_cast<uint64_t>(b) << 32) | a;
  uint32_t out = 0;
  for (int i = 0; i < 4; ++i) {
    const uint32_t pick = (selector >> (4 * i)) & 7u;
    out |= static_cast<uint32_t>((bytes >> (8 * pick)) & 0xFFu) << (8 * i);
  }
  return out;
#endif
}

// INT4: the four magic pairs of one word: b[m][r] = (magic + q_j, magic + q_j+4), j = 2m + r
// (nibble j in the low half, j + 4 in the high half). 3 shifts and 4 LOP3 for 8 values.
template <bool kBf16>
MG_HOST_DEVICE inline void int4_magic_pairs(uint32_t word, uint32_t (&b)[2][2]) {
  constexpr uint32_t kMask = 0x000F000Fu;
  constexpr uint32_t kMagic = kMagicHalf<kBf16> * 0x00010001u;
  b[0][0] = and_or(word, kMask, kMagic);
  b[0][1] = and_or(word >> 4, kMask, kMagic);
  b[1][0] = and_or(word >> 8, kMask, kMagic);
  b[1][1] = and_or(word >> 12, kMask, kMagic);
}

// E2M1 (MXFP4 / NVFP4 codes: sign bit 3, exponent bits 2..1, mantissa bit 0), placed bit for bit:
// b[m][r] holds nibbles j = 2m + r (low half) and j + 4 (high half), the pairing of
// int4_magic_pairs, each with its magnitude bits (e, m) as T's lowest exponent bits and top
// mantissa bit (BF16 bits 6..8, F16 bits 9..11) and its sign as T's sign. A T value so made is
// e2m1 · 2^-126 (BF16) / e2m1 · 2^-14 (F16) for every code: exponent 0 is T's subnormal m / 2
// times the smallest normal, exactly E2M1's own subnormal 0.5 · m. One multiply by
// kE2M1Unbias (exact: a power of two, the result a normal number of two significant bits) makes
// it the code's value. 7 shifts and 8 LOP3 for 8 values.
template <bool kBf16>
inline constexpr uint32_t kE2M1MagMask = kBf16 ? 0x01C001C0u : 0x0E000E00u;
template <int kShift>
MG_HOST_DEVICE constexpr uint32_t shift_left(uint32_t word) {  // a right shift for kShift < 0
  if constexpr (kShift >= 0) {
    return word << kShift;
  } else {
    return word >> -kShift;
  }
}
template <bool kBf16>
MG_HOST_DEVICE inline void e2m1_placed_pairs(uint32_t word, uint32_t (&b)[2][2]) {
  constexpr uint32_t kSign = 0x80008000u, kMag = kE2M1MagMask<kBf16>;
  // Nibble j's code bit 0 (at 4j) goes to T bit kS, its sign (4j + 3) to bit 15.
  constexpr int kS = kBf16 ? 6 : 9;
  b[0][0] = and_or(word << 12, kSign, shift_left<kS>(word) & kMag);
  b[0][1] = and_or(word << 8, kSign, shift_left<kS - 4>(word) & kMag);
  b[1][0] = and_or(word << 4, kSign, shift_left<kS - 8>(word) & kMag);
  b[1][1] = and_or(word, kSign, shift_left<kS - 12>(word) & kMag);
}

// The half2 pair that makes e2m1_placed_pairs' values E2M1 values (2^126 BF16, 2^14 F16) or, with
// kDoubled, twice them (2^127, 2^15: the per-value path's 2·e2m1, which NVFP4's 0.5 · global
// expects).
template <bool kBf16, bool kDoubled>
inline constexpr uint32_t kE2M1Unbias = kBf16 ? (kDoubled ? 0x7F007F00u : 0x7E807E80u)
                                              : (kDoubled ? 0x78007800u : 0x74007400u);

// The F32 bits of the E8M0 scale 2^(code - 127) of byte `unit` of `bytes`: the byte shifted into
// the exponent field; code 0 (2^-127, an F32 subnormal) through the max (every other code's bits
// are larger). Code 255 (NaN) never reaches the kernels (the packer refuses it).
MG_HOST_DEVICE inline uint32_t e8m0_scale_bits(uint32_t bytes, int unit) {
  const int shift = 23 - 8 * unit;  // byte `unit` -> bits 23..30
  const uint32_t bits = (shift >= 0 ? bytes << shift : bytes >> -shift) & 0x7F800000u;
  return bits > 0x00400000u ? bits : 0x00400000u;
}

// BF16 MXFP4 with the E2M1 unbias folded into the scale (fp4_placed_fragments' one HMUL2 a
// register instead of two): the pair 2^(code - 1 - shift) of byte `unit` of `bytes`, whose bits
// are (code + 126 - shift) << 7 in both halves: one PRMT and one IMAD with `bias` =
// e8m0_unbias_bias(shift). A placed value e2m1 · 2^-126 times it is w · 2^-shift, w = e2m1 ·
// 2^(code - 127) the real weight, exactly for every code 0 .. 128 + shift when 0 <= shift <=
// kE8m0MaxShift: the pair is then a normal BF16 (exponent field 121 .. 254), the product is at
// most 6 · 2 and a multiple of 2^-133 (BF16's least subnormal) with at most 2 significant bits.
// The kernels multiply their fp32 sums by 2^shift (exact), which at shift 0 leaves nothing to do:
// the B values are then the two multiplies' w bit for bit. e8m0_shift_of picks a matrix's shift
// from its largest code.
inline constexpr int kE8m0MaxShift = 5;
inline constexpr uint32_t kE8m0MaxFoldedCode = 128 + kE8m0MaxShift;  // scale 2^6
inline constexpr int kE8m0MaxFoldedExponent = static_cast<int>(kE8m0MaxFoldedCode) - 127;
MG_HOST_DEVICE constexpr uint32_t e8m0_unbias_bias(int shift) {
  return static_cast<uint32_t>(126 - shift) * 0x00800080u;
}
MG_HOST_DEVICE inline uint32_t e8m0_bf16_unbiased_pair(uint32_t bytes, int unit, uint32_t bias) {
  const uint32_t u = static_cast<uint32_t>(unit);
  return byte_perm(bytes, 0u, 0x4040u | u | (u << 8)) * 128u + bias;
}
// The shift of a matrix whose largest E8M0 code is `max_code` (<= kE8m0MaxFoldedCode).
MG_HOST_DEVICE constexpr int e8m0_shift_of(uint32_t max_code) {
  return max_code > 128 ? static_cast<int>(max_code) - 128 : 0;
}

// E4M3 codes (NVFP4's scales) in bytes 0 and 1 of `bytes`, placed into a BF16 pair bit for bit:
// value · 2^-120 (exponent bias 7 against 127; E4M3's subnormals are BF16 subnormals of the same
// scaled value); one multiply by kE4M3Unbias makes it exact. Byte 0 -> the low half.
MG_HOST_DEVICE inline uint32_t e4m3_placed_pair_bf16(uint32_t bytes) {
  const uint32_t pair = byte_perm(bytes, 0u, 0x4140u);  // byte 0 -> bits 0..7, byte 1 -> 16..23
  return and_or(pair << 4, 0x07F007F0u, (pair << 8) & 0x80008000u);
}
inline constexpr uint32_t kE4M3UnbiasBf16 = 0x7B807B80u;  // 2^120, both halves

// INT8, F16: bytes 2h and 2h + 1 of `word` as the pair (1024 + q, 1024 + q') (one PRMT).
MG_HOST_DEVICE inline uint32_t int8_magic_pair_f16(uint32_t word, int h) {
  return byte_perm(word, 0x64646464u, h == 0 ? 0x4140u : 0x4342u);
}

// INT8, BF16: byte i of `word` under the F32 2^23 (the bits of 2^23 + q; one PRMT).
MG_HOST_DEVICE inline uint32_t int8_magic_f32_bits(uint32_t word, int i) {
  return byte_perm(word, kMagicF32, 0x7540u + static_cast<uint32_t>(i));
}

// The half2 pair (magic + z, magic + z) the HSUB2 takes off (INT4 BF16 / F16, INT8 F16).
template <bool kBf16>
MG_HOST_DEVICE constexpr uint32_t zero_magic_pair(uint32_t z) {
  return (kMagicHalf<kBf16> | z) * 0x00010001u;
}

// The zero point code of the pair {s, neg_zs = -z·s} (see the header comment: exact for every pair
// wna16_zero_kind accepts). 0 when s == 0 (0 · 1/0 is NaN, which converts to 0; the weights are 0
// for any z). The device multiplies by the approximate reciprocal (MUFU.RCP, within 1 ulp; s is
// normal, so flushing subnormals changes nothing): 3 instructions.
MG_HOST_DEVICE inline int zero_code(float s, float neg_zs) {
#ifdef __CUDA_ARCH__
  float r;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(s));
  return __float2int_rn(-neg_zs * r);  // NaN -> 0
#else
  const float q = -neg_zs / s;
  return q == q ? static_cast<int>(nearbyintf(q)) : 0;
#endif
}

}  // namespace mg::cuda::wna16_exact
