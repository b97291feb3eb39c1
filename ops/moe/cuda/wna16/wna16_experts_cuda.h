// CUDA kernels of the weight-only INT4 / INT8 (WNA16: W4A16, W8A16) MoE experts, host side.
// Host-only header: the kernels live in wna16_gemm.cuh and are instantiated per activation dtype
// and code kind in wna16_gemm_<dtype>_<int4|int8|mxfp4|nvfp4>.cu; the packing is plain C++
// (wna16_pack_cuda.cc).
//
// The math, which the tests' CPU reference follows:
//   input        per matrix W [E, N, K] (rows = output channels, y = x Wᵀ): integer codes q
//                (0..15 for 4 bits, 0..255 for 8 bits), F32 scales s [E, N, ceil(K / G)] and
//                optional zero points z of the same shape (absent: symmetric, z = 8 / 128);
//                real W[e, n, k] = (q[e, n, k] - z[e, n, k / G]) * s[e, n, k / G].
//                G in {32, 64, 128, ...} (any multiple of 32 that divides K) or channel-wise
//                (one group of all K); K not a multiple of G is refused (wna16_pack_check).
//   in registers each weight becomes w = round_T(fma(q, s, -z·s)) in fp32 (T = the activation
//                dtype, BF16 or F16), the tensor cores' B operand: the dequantized weight is
//                rounded once, as a BF16/F16 copy of the real weights would be.
//   GEMM         out[m, n] = epilogue(Σ_k x[m, k] · w[n, k]) with fp32 accumulation (mma.sync
//                m16n8k16), bias (F32) and the activation in fp32, one rounding to T.
//   expert MLP   h = act(GEMM1(x, w13) + b13) rounded to T (N1 = 2I gated: gate rows, then up
//                rows; I plain), y = GEMM2(h, w2) + b2 rounded to T; the weighted sum over top-k is
//                ops/moe/cuda/moe_align_cuda.h's launch_moe_combine (the BF16 path's).
//
// Why mma.sync and not wgmma: the weights are dequantized in registers, and an mma.sync B
// fragment is exactly the 4 values per lane that one packed 32-bit word (or two) holds, so a
// lane turns its own word into its own operand with no shared-memory round trip. wgmma reads B
// from shared memory only: dequantized weights would have to be written back to shared memory
// (and fenced for the async proxy) before every wgmma, which is what Machete does with a far more
// involved warp-specialised pipeline. At decode sizes (the common case of weight-only models) the
// kernel is bound by HBM bytes, not by tensor-core rate, so mma.sync costs nothing there; at large
// M the experts backends dequantize once per call and run the BF16 wgmma / TMA GEMMs (section 4).
// The TMA GEMM with three producer warps dequantizing its weight tiles into shared memory was
// built and measured 1.5-5x slower than these paths, bound by those warps and their scales' loads
// (docs/performance.md, "A fused TMA + wgmma WNA16 GEMM"; branch wip/wna16-fused-tma). What does
// beat them from 17 rows an expert (INT4, integer zero points) is the other way round: the
// weights as wgmma's register A operand, converted by the consumers themselves
// (wna16_wgmma.cuh, Wna16GemmKernel::kWgmma).
//
// Every launcher neither syncs nor allocates (scratch comes from the caller) and can be captured
// in a CUDA graph.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ops/moe/cuda/grouped_gemm_cuda.h"
#include "ops/moe/cuda/moe_align_cuda.h"
#include "ops/moe/cuda/moe_cuda_types.h"
#include "ops/moe/cuda/wna16/wna16_codes.h"

namespace mg::cuda {

// ---------------------------------------------------------------------------------------------
// 1. The packed weight layout (built once, at construction, by wna16_pack).
//
// K is padded to a multiple of kWna16KStep (128) with code 0 (the padded activations the kernel
// reads are zero-filled, so the padding adds nothing), and each part of the rows (gated w13 has
// two: gate, up) is padded to a multiple of 8 rows. Per expert, per block of 8 rows, per 128-wide
// K step, 32 lanes × W 32-bit words (W = 4 for 4 bits, 8 for 8 bits) are stored as
// [W / 4][32 lanes][4 words], so a lane's four words are one 16-byte load and a warp's are 512
// consecutive bytes. Lane l = 4 g + t holds row g of the block and, per 32-wide K unit u (0..3) and
// k16 half h (0, 1), the 4 values of its mma.sync m16n8k16 B fragment, at k = 32 u + 16 h +
// {2t, 2t + 1, 2t + 8, 2t + 9}:
//   4 bits: word u, nibbles 4h .. 4h + 3 (least significant first)
//   8 bits: word 2u + h, bytes 0 .. 3
// The per-group parameters are F32 pairs {s, -z·s}, [E, rows_padded, groups, 2].
//
// FP4 E2M1 codes (MXFP4, NVFP4: wna16_pack_e2m1) use the same 4-bit word layout with another
// dequantization policy: a code's value is e2m1(q) times its scale, and the scales stay one byte
// each (no F32 pairs: params is empty), laid out like the words, per expert, 8-row block and K
// step:
//   scale_bytes [E, row_blocks, k_steps, 8 rows, U]: U = 4 (kMxfp4: the E8M0 code of each 32-wide
//               unit) or 8 (kNvfp4: the E4M3 codes of each unit's two k16 halves, unit-major), so a
//               CTA's scales of one step are 32 (64) contiguous bytes per block, and a lane reads
//               its row's with one 4- (8-) byte load;
//   globals     kNvfp4 only: F32 [E, parts], the global scale of each expert's gate / up part (or
//               its only part), applied once per output in the epilogue (acc * global / 2).
// In registers: kMxfp4 w = 2·e2m1(q) · 2^(code - 128) (the E8M0 code shifted into an F32 exponent,
// halved because the kernels decode 2·|e2m1(q)|, the integers 0..12, exactly): the product is
// exact, e2m1(q) · 2^(code - 127) in F32, before its rounding to the activation dtype. kNvfp4
// w = 2·e2m1(q) · e4m3(code) (at most 6 significant bits, so exact in BF16 and F16), and the
// accumulator is multiplied by global / 2: the real weight e2m1 · e4m3 · global is never rounded.
// Bytes per value: 0.5 + 1/32 (MXFP4, 4.25 bits) or 0.5 + 1/16 (NVFP4, 4.5 bits), + 8 a matrix.

inline constexpr int64_t kWna16KStep = 128;

// What the kernels may assume about the zero points of integer codes, found once on the host by
// wna16_zero_kind when the params are made (the decode kernels pick their dequantization from it
// at launch; the grouped GEMM reads every pair as {s, -z·s} either way).
enum class Wna16Zeros : int32_t {
  kReal,          // any F32 zero points (or not known): w = fma(q, s, -z·s) per value
  kIntegerCodes,  // every pair's z is an integer code 0 .. 2^bits - 1 that the kernels recover
                  // exactly from {s, -z·s} (wna16_exact_codes.h): the decode kernels multiply
                  // the exact q - z and apply s once per group
};

// kIntegerCodes when every (s, z) of `count` groups is an integer code z in 0 .. 2^bits - 1 with
// s == 0 or 2^-100 <= |s| <= 2^100 (zeros: F32, uint8, or neither: the midpoint 8 / 128), else
// kReal (wna16_exact_codes.h says why that range makes the recovery exact).
Wna16Zeros wna16_zero_kind(const float* scales, const float* zeros_f32, const uint8_t* zeros_u8,
                           int64_t count, int bits);

// Wna16Codes (what a packed code means) and wna16_scale_bytes_per_step: wna16_codes.h.

// The input contract of one matrix on the host (see the math above).
struct Wna16HostMatrix {
  const uint8_t* codes = nullptr;  // [E, N, K]
  const float* scales = nullptr;   // [E, N, groups]
  // Zero points [E, N, groups] as F32 or as uint8 (at most one), or neither (symmetric).
  const float* zeros_f32 = nullptr;
  const uint8_t* zeros_u8 = nullptr;
  int64_t experts = 0, rows = 0, cols = 0;
  int bits = 4;
  int64_t group_size = 128;  // columns per group; -1 (or cols): channel-wise
};

// The packed matrix on the host, ready to upload.
struct Wna16PackedHost {
  std::vector<uint32_t> words;       // [E, row_blocks, k_steps, W / 4, 32, 4]
  std::vector<float> params;         // kInteger: [E, rows_padded, groups, 2] {s, -z·s}; FP4: empty
  std::vector<uint8_t> scale_bytes;  // FP4: [E, row_blocks, k_steps, 8, U] (see above)
  std::vector<float> globals;        // kNvfp4: [E, parts]
  int bits = 4;
  Wna16Codes codes = Wna16Codes::kInteger;
  int64_t experts = 0;
  int64_t parts = 1;      // 2: gated w13 (gate rows, then up rows), each padded on its own
  int64_t part_rows = 0;  // rows of one part, padded to a multiple of 8
  int64_t cols = 0;       // K (unpadded)
  int64_t k_steps = 0;    // ceil(K / 128)
  int64_t groups = 1;
  int64_t group_size = 0;                // columns per group (K when channel-wise)
  Wna16Zeros zeros = Wna16Zeros::kReal;  // kInteger: set by the packer (wna16_zero_kind)
  int e8m0_shift = 0;                    // kMxfp4: set by the packer (Wna16Weights says what)

  // Sizes of words, params, scale_bytes and globals (the vectors may be empty: wna16_layout).
  int64_t word_count() const {
    return experts * parts * part_rows / 8 * k_steps * 32 * (bits == 4 ? 4 : 8);
  }
  int64_t param_count() const {
    return codes == Wna16Codes::kInteger ? experts * parts * part_rows * groups * 2 : 0;
  }
  int64_t scale_byte_count() const {
    return experts * parts * part_rows * k_steps * wna16_scale_bytes_per_step(codes);
  }
  int64_t global_count() const { return codes == Wna16Codes::kNvfp4 ? experts * parts : 0; }
  // Bytes the kernels stream per expert: codes and group pairs, or codes, scale bytes and globals.
  double bytes_per_expert() const {
    return (4.0 * static_cast<double>(word_count() + param_count() + global_count()) +
            static_cast<double>(scale_byte_count())) /
           static_cast<double>(experts);
  }
};

// Number of scale groups of a K-wide row: 1 channel-wise (group_size -1 or >= K), else K / G.
inline int64_t wna16_groups(int64_t cols, int64_t group_size) {
  return group_size < 0 || group_size >= cols ? 1 : (cols + group_size - 1) / group_size;
}

// "" when a [.., rows, cols] matrix of `bits` codes with groups of `group_size` columns split in
// `parts` equal row parts can be packed for these kernels, else the reason.
std::string wna16_pack_check(int bits, int64_t rows, int64_t cols, int64_t group_size,
                             int64_t parts);

// The fields of wna16_pack's result for such a matrix, without its data (words and params empty).
// Throws mg::Error when wna16_pack_check refuses.
Wna16PackedHost wna16_layout(int64_t experts, int64_t rows, int64_t cols, int bits,
                             int64_t group_size, int64_t parts);

// Repacks `m` into the kernels' layout; `parts` = 2 for a gated w13 ([gate; up] rows, each half
// padded separately), else 1. Throws mg::Error when wna16_pack_check refuses, or a code or uint8
// zero point is out of range for `bits`.
Wna16PackedHost wna16_pack(const Wna16HostMatrix& m, int64_t parts);

// "" when a [.., rows, cols] FP4 E2M1 matrix with scale groups of `group_size` columns split in
// `parts` row parts can be packed with the scale bytes of `codes` (kMxfp4: groups a multiple of 32,
// one E8M0 byte per 32-wide unit; kNvfp4: a multiple of 16, an E4M3 byte per k16 half; a partial
// last group is fine), else the reason.
std::string wna16_pack_e2m1_check(Wna16Codes codes, int64_t rows, int64_t cols, int64_t group_size,
                                  int64_t parts);

// The fields of wna16_pack_e2m1's result, without its data. Throws as wna16_pack_e2m1_check.
Wna16PackedHost wna16_layout_e2m1(Wna16Codes codes, int64_t experts, int64_t rows, int64_t cols,
                                  int64_t parts);

// Repacks FP4 E2M1 codes `packed` [E, rows, cols / 2] (two per byte, the even column in the low
// nibble: framework/core/fp4.h) with their effective F32 scales `scales` [E, rows, ceil(cols /
// group_size)] (E8M0 decoded; NVFP4: E4M3 times the global scale) into the kernels' layout, codes
// kept 4-bit and scales encoded back into bytes: kMxfp4 scales must be powers of two 2^-127 ..
// 2^127; kNvfp4 scales e4m3 * globals[e, part] (`globals` F32 [E, parts], null: all 1), to within
// F32 rounding of that product (ModelOpt multiplies by its global, compressed-tensors divides).
// Throws mg::Error when wna16_pack_e2m1_check refuses or a scale has no such byte, naming it.
Wna16PackedHost wna16_pack_e2m1(Wna16Codes codes, const uint8_t* packed, const float* scales,
                                const float* globals, int64_t experts, int64_t rows, int64_t cols,
                                int64_t group_size, int64_t parts);

// Random packed weights made on the GPU (benchmarks: the host never holds them): every word
// uniform (so every code is uniform), each group's pair {s, -z·s} with s uniform in
// [0.5, 1.5] · scale and z a uniform integer code. Deterministic in `seed`. One launch each.
void launch_wna16_random_fill(uint32_t* words, int64_t word_count, float* params,
                              int64_t param_count, int bits, float scale, uint64_t seed,
                              cudaStream_t stream);

// The input contract with its own arrays: what wna16_quantize_host makes (tests, benchmarks and
// random quantized layers build their weights with it).
struct Wna16HostCodes {
  std::vector<uint8_t> codes;  // [E, N, K]
  std::vector<float> scales;   // [E, N, groups]
  std::vector<float> zeros;    // [E, N, groups] F32, or empty: symmetric
  int64_t experts = 0, rows = 0, cols = 0;
  int bits = 4;
  int64_t group_size = 128;

  Wna16HostMatrix view() const;
};

// Quantizes w [E, N, K] F32 (row-major) per group of `group_size` columns (-1: channel-wise):
// symmetric: s = absmax / (2^(bits-1) - 1), z = 2^(bits-1) (no zeros stored); asymmetric:
// s = (max - min) / (2^bits - 1), integer z = round(-min / s) stored as F32; q = clamp(round(w / s)
// + z, 0, 2^bits - 1). An all-zero group gets s = 1. K not a multiple of the group is refused as
// wna16_pack_check does.
Wna16HostCodes wna16_quantize_host(const float* w, int64_t experts, int64_t rows, int64_t cols,
                                   int bits, int64_t group_size, bool symmetric);

// The real weights of the contract: (q - z) * s as F32 [E, N, K].
std::vector<float> wna16_dequantize_host(const Wna16HostMatrix& m);

// The weights a packed matrix holds, read back through the layout: fma(q, s, -z·s) as F32
// [E, rows, K] for the `rows` unpadded rows (parts as packed; FP4: e2m1(q) times its scale byte's
// value, times the part's global for kNvfp4). The inverse of wna16_pack (up to the fma) and of
// wna16_pack_e2m1, for tests of weights made on the GPU.
std::vector<float> wna16_unpack_host(const Wna16PackedHost& p, int64_t rows);

// The device view of a packed matrix (Wna16PackedHost uploaded).
struct Wna16Weights {
  const uint32_t* words = nullptr;
  const float* params = nullptr;         // kInteger
  const uint8_t* scale_bytes = nullptr;  // kMxfp4, kNvfp4
  const float* globals = nullptr;        // kNvfp4: [E, parts]
  int bits = 4;
  Wna16Codes codes = Wna16Codes::kInteger;
  int64_t parts = 1;
  int64_t part_rows = 0;
  int64_t k_steps = 0;
  int64_t groups = 1;
  int64_t group_size = 0;
  Wna16Zeros zeros = Wna16Zeros::kReal;
  // kMxfp4: the kernels that place the codes in BF16 fold E2M1's unbias into the scale pairs,
  // which makes their B values w · 2^-shift (wna16_exact_codes.h, e8m0_bf16_unbiased_pair), and
  // multiply their fp32 sums by 2^shift: 0 .. kE8m0MaxShift, from the matrix's largest scale code.
  int e8m0_shift = 0;
};

// The device view of `p` whose words, params, scale bytes and globals were uploaded to `words`,
// `params`, `scale_bytes` and `globals` (those the layout does not use may be null).
Wna16Weights wna16_weights_view(const Wna16PackedHost& p, const uint32_t* words,
                                const float* params, const uint8_t* scale_bytes = nullptr,
                                const float* globals = nullptr);

// ---------------------------------------------------------------------------------------------
// 2. The grouped GEMM (mma.sync m16n8k16, weights dequantized in registers).

enum class Wna16GemmKernel : int32_t {
  kMma16,  // 16-row tiles: decode-sized groups (few rows per expert), every weight read once
  kMma32,  // 32-row tiles: each dequantized B fragment feeds two m16 MMAs
  kMma64,  // 64-row tiles: each dequantized B fragment feeds four m16 MMAs
  // sm_90a: the persistent TMA kernel with the packed weights as wgmma's register A operand
  // (wna16_wgmma.cuh): INT4 codes with integer zero points, permuted rows (the caller gathers)
  kWgmma,
};

inline constexpr Wna16GemmKernel kAllWna16GemmKernels[] = {
    Wna16GemmKernel::kMma16, Wna16GemmKernel::kMma32, Wna16GemmKernel::kMma64,
    Wna16GemmKernel::kWgmma};

constexpr std::string_view wna16_gemm_kernel_name(Wna16GemmKernel kernel) {
  switch (kernel) {
    case Wna16GemmKernel::kMma16:
      return "wna16_mma16";
    case Wna16GemmKernel::kMma32:
      return "wna16_mma32";
    case Wna16GemmKernel::kMma64:
      return "wna16_mma64";
    case Wna16GemmKernel::kWgmma:
      return "wna16_wgmma";
  }
  return "?";
}

// The kernel named `name`, or nullopt.
inline std::optional<Wna16GemmKernel> parse_wna16_gemm_kernel(std::string_view name) {
  for (Wna16GemmKernel kernel : kAllWna16GemmKernels) {
    if (wna16_gemm_kernel_name(kernel) == name) return kernel;
  }
  return std::nullopt;
}

// By the rows an expert averages (max_rows / E): 16-row tiles up to 16 (then the weights are
// nearly all the bytes and more, narrower CTAs stream them); then FP4 codes take 32-row tiles up
// to 32 and 64-row tiles above, integer codes 64-row tiles (the large-M path takes over from
// kWna16DequantMinRowsPerExpert). M <= 8 tokens (decode) always lands on kMma16 for top_k <= 2 E.
// A tile's cost follows the tiles each expert needs (its rows are spread around the average), so
// from ~48 rows an expert the 32-row tile's third tile loses to the 64-row tile's second. Set by
//   moegraph bench moe --quant mxfp4|int4-g128|int4-g64 --shape gpt-oss-120b,qwen3-30b-a3b
//     --tokens 256,512,768,1024,1536,2048,4096 --kernel wna16_mma16,wna16_mma32,wna16_mma64
//     --no-check
// on an H200 (2026-12-02; docs/performance.md), µs mma16 / mma32 / mma64 by rows an expert,
// MXFP4: 16: gpt-oss-120b 1208.8 / 1181.2 / 1818.0, qwen3-30b-a3b 268.9 / 269.2 / 397.0; 32:
// 2009.3 / 1729.1 / 1871.4, 443.6 / 387.6 / 426.4; 48 (mma32 / mma64): 2469.3 / 1953.9 (gpt-oss
// 1536 tokens), 515.5 / 467.1 (qwen3 768); 64: 3597.1 / 2865.2 / 2768.5, 777.6 / 626.7 / 666.1
// (qwen3 the one point the rule loses, by 6%); 128: 6724.7 / 5126.1 / 4632.5, 1427.4 / 1102.6 /
// 1102.5. INT4 (qwen3 g128, gpt-oss g64; mma16 and mma32 on the exact path, wna16_gemm_exact):
// 16: qwen3 337.2 / 348.2 / 479.7, gpt-oss 1612.2 / 1634.7 / 2365.2; 32: 555.9 / 512.6 / 483.2
// (the per-value mma64 of an earlier run; 521.4 exact), 2711.4 / 2417.3 / 2103.5 (per value); 64:
// 986.3 / 839.3 / 754.3 (per value).
inline Wna16GemmKernel choose_wna16_gemm_kernel(int64_t max_rows, int64_t num_experts,
                                                Wna16Codes codes) {
  const int64_t experts = num_experts > 0 ? num_experts : 1;
  if (max_rows <= 16 * experts) return Wna16GemmKernel::kMma16;
  if (codes == Wna16Codes::kInteger) return Wna16GemmKernel::kMma64;
  return max_rows <= 32 * experts ? Wna16GemmKernel::kMma32 : Wna16GemmKernel::kMma64;
}

// Whether the grouped GEMM takes `w` through the exact integer path (wna16_gemm.cuh): integer
// codes whose zero points are integer codes, on the 16- and 32-row tiles. The 64-row tile keeps
// the per-value path: there each B fragment already feeds four m16 blocks, and the exact path's
// per-block A permutation, group sums and zero-point recovery made it slower (qwen3-30b-a3b int4
// g128, µs per value / exact, same H200 session: 483.2 / 521.4 at 512 tokens, 754.3 / 826.3 at
// 1024, 1265.1 / 1390.9 at 2048; gpt-oss-120b int4 g64 2103.5 / 2440.5 at 1024), while the 16-row
// tile gained 1.2-1.3x (qwen3 256 tokens 437.4 / 337.2, gpt-oss 512 1996.5 / 1612.2).
inline bool wna16_gemm_exact(const Wna16Weights& w, Wna16GemmKernel kernel) {
  return w.codes == Wna16Codes::kInteger && w.zeros == Wna16Zeros::kIntegerCodes &&
         kernel != Wna16GemmKernel::kMma64;
}

// Whether `kernel` reads the activations permuted (x_perm, gathered by the caller) rather than
// gathering them itself through row_to_pair.
inline bool wna16_gemm_reads_permuted(Wna16GemmKernel kernel) {
  return kernel == Wna16GemmKernel::kWgmma;
}

// "" when wna16_wgmma (wna16_wgmma.cuh) takes a GEMM of `b` over K with max_rows permuted rows,
// else the reason (the callers name the kernel). Its TMA boxes need K >= 64, >= 16 rows and
// >= 128 packed rows in all; its exact q - z needs integer zero points; it reads 4-bit codes.
inline std::string wna16_wgmma_check(const Wna16Weights& b, int64_t k, int64_t max_rows,
                                     int64_t num_experts) {
  if (b.codes != Wna16Codes::kInteger || b.bits != 4 || b.zeros != Wna16Zeros::kIntegerCodes) {
    return "it takes INT4 codes whose zero points are integer codes (symmetric, GPTQ, AWQ, "
           "compressed-tensors), not these weights";
  }
  if (k < 64 || max_rows < 16) {
    return "its TMA boxes need K >= 64 and >= 16 rows, not K " + std::to_string(k) + " and " +
           std::to_string(max_rows) + " rows";
  }
  if (num_experts * b.parts * b.part_rows / 8 < 16) return "its TMA boxes need >= 128 packed rows";
  if (b.groups > 1 && b.group_size % 16 != 0) {
    return "its scale groups must be multiples of 16 columns";
  }
  return "";
}

// All pointers device pointers; a and c 16-byte aligned.
struct Wna16GemmArgs {
  // [rows, K] T. With row_to_pair set, row r of the GEMM reads a[row_to_pair[r] / top_k] (the
  // gather of the BF16 path fused into the loads: a is the unpermuted x); else a is permuted.
  const void* a = nullptr;
  const int32_t* row_to_pair = nullptr;
  int64_t top_k = 1;
  Wna16Weights b;               // parts = 2 (gated) when epilogue is kActivation with a gated kind
  const float* bias = nullptr;  // [E, N_b] F32 or null (N_b = 2N gated, else N)
  void* c = nullptr;            // [max_rows, N] T (permuted rows)
  const int32_t* expert_offsets = nullptr;  // [E + 1] DEVICE, as GroupedGemmArgs
  int64_t num_experts = 0;
  int64_t max_rows = 0;  // host-known upper bound of offsets[E]
  int64_t n = 0;         // N: output columns
  int64_t k = 0;         // K: a multiple of 8
  GroupedEpilogue epilogue = GroupedEpilogue::kBias;
  MoEActParams act;
};

// "" when the kernels take a GEMM with N outputs over K, else the reason.
inline std::string wna16_gemm_check(int64_t n, int64_t k) {
  if (n <= 0 || k <= 0) {
    return "WNA16 GEMM N " + std::to_string(n) + " and K " + std::to_string(k) +
           " must be positive";
  }
  if (k % 8 != 0) {
    return "WNA16 GEMM K " + std::to_string(k) +
           " must be a multiple of 8 (activation rows are read in 16-byte vectors)";
  }
  if (n > (int64_t{1} << 30) || k > (int64_t{1} << 30)) {
    return "WNA16 GEMM N " + std::to_string(n) + " and K " + std::to_string(k) +
           " must fit 32-bit indices";
  }
  return "";
}

// c[r, :] = epilogue(a[r] · w[e]ᵀ) for the rows of every expert; rows outside
// [offsets[0], offsets[E]) are not written. T = __nv_bfloat16 or __half.
template <typename T>
void launch_wna16_grouped_gemm(const Wna16GemmArgs& args, Wna16GemmKernel kernel,
                               cudaStream_t stream);

// Whether this GPU and build run wna16_wgmma (the sm_90a kernels are loaded), for activation
// dtype T (__nv_bfloat16 or __half). A host-side query, asked once per process.
template <typename T>
bool wna16_wgmma_available();

// ---------------------------------------------------------------------------------------------
// 3. The expert MLP on permuted rows: GEMM1 (gather fused) + act, GEMM2 (+ b2). Two launches; the
// caller runs launch_moe_align before and launch_moe_combine after (ops/moe/cuda/moe_align_cuda.h),
// so the whole experts step is four launches at any M: at M <= 8 every touched expert is one
// 16-row tile and its packed weights are read once. (The experts backends take the decode kernels
// of wna16_decode_cuda.h there instead: two launches, no align or combine.)

// A kernel that reads permuted rows (wna16_gemm_reads_permuted) needs x permuted: the caller
// gathers (launch_moe_gather) and passes row_to_pair null.
struct Wna16ExpertMlpArgs {
  const void* x = nullptr;               // [tokens, H] T (not permuted), or [max_rows, H] permuted
  const int32_t* row_to_pair = nullptr;  // [max_rows] (MoEAlignment) or null: x is permuted
  int64_t top_k = 1;
  const int32_t* expert_offsets = nullptr;  // [E + 1] device
  int64_t num_experts = 0;
  int64_t max_rows = 0;        // host bound of offsets[E] (tokens * top_k)
  int64_t hidden = 0;          // H
  int64_t inter = 0;           // I
  Wna16Weights w13;            // parts 2 gated / 1 plain, [E, N1, H]
  const float* b13 = nullptr;  // [E, N1] F32 or null
  Wna16Weights w2;             // [E, H, I]
  const float* b2 = nullptr;   // [E, H] F32 or null
  MoEActParams act;
  void* h = nullptr;    // scratch [max_rows, I] T (wna16_expert_mlp_scratch_bytes)
  void* out = nullptr;  // [max_rows, H] T: each permuted row's expert output (for combine)
};

inline size_t wna16_expert_mlp_scratch_bytes(int64_t max_rows, int64_t inter,
                                             size_t element_bytes) {
  return (static_cast<size_t>(max_rows) * inter * element_bytes + 255) / 256 * 256;
}

// "" when the MLP kernels take (hidden, inter), else the reason.
inline std::string wna16_expert_mlp_check(int64_t hidden, int64_t inter) {
  std::string why = wna16_gemm_check(inter, hidden);
  if (why.empty()) why = wna16_gemm_check(hidden, inter);
  return why;
}

template <typename T>
void launch_wna16_expert_mlp(const Wna16ExpertMlpArgs& args, Wna16GemmKernel kernel,
                             cudaStream_t stream);

// ---------------------------------------------------------------------------------------------
// 4. The large-M path: dequantize once per call, then the BF16/F16 grouped GEMMs.
//
// The kernels of section 2 dequantize every weight in registers once per 16- or 64-row tile, so
// with hundreds of rows per expert they redo that work rows / BM times and lose to the BF16
// wgmma / TMA grouped GEMMs (grouped_gemm_cuda.h) by 1.5-3x (docs/performance.md, H100, M 4096).
// From kWna16DequantMinRowsPerExpert rows an expert on, the experts backends instead write the
// weights of the experts this call touches as dense T [E, N_b, K] (the unquantized layout: gated
// w13 gate rows [0, I) then up rows [I, 2I)) into their workspace and run cuda_moe's grouped
// pipeline over them:
//
//   gather x -> per chunk of experts: dequantize w13 and w2 (and the F32 biases to T)
//            -> grouped GEMM1 + act -> grouped GEMM2 (+ b2)
//
// then the caller's combine, as after launch_wna16_expert_mlp. Nothing dequantized is kept
// between calls (the packed weights stay the only copy), and the workspace is bounded: the experts
// are processed in chunks whose dense weights fit budget_bytes. The chunk sizes come from E and
// the budget on the host, never from the device's counts, so a call is graph-capturable; experts
// of a chunk that got no rows are skipped by the dequantize kernel (their CTAs read the counts).
//
// The values: a dequantized weight is the section-2 kernels' per-value B operand, round_T(fma(q,
// s, -z·s)) for integer codes, round_T(2·e2m1(q) · 2^(code - 128)) for MXFP4 (the same Dequant
// policies of wna16_gemm.cuh compute both; their exact integer path rounds no weight, so it
// differs from this path by each weight's rounding to T); NVFP4 weights are round_T(e2m1 · e4m3 ·
// global), one rounding of the real weight, where the mma path keeps 2·e2m1 · e4m3 (exact in T) and
// applies global / 2 to the fp32 accumulator: a T weight cannot hold the product unrounded. The
// BF16 GEMMs take T biases, so the F32 biases are rounded to T here (the mma path adds them in
// fp32); both differences are within half an ulp of T per value, as for any BF16 copy of the
// weights.

// When the experts backends (cuda_wna16, cuda_fp4) take this path unless a kernel is forced
// (`:wna16_dequant` forces it at any M, `:wna16_mma16|wna16_mma32|wna16_mma64` the section-2
// GEMMs): from kWna16DequantMinRowsPerExpert expected rows per expert (tokens x top_k / E) on. Set
// by
//   MG_WNA16_TIMING=1 mg_cuda_tests --gtest_filter='CudaWna16Experts.TimingDequant*'
// on an H100 (2026-11-25, qwen3-30b-a3b INT4 g128, E 128, k 8): mma path / this path / BF16
// weights 737.6 / 1117.2 / 530.7 us at 1024 tokens (64 rows an expert), 2255.6 / 1474.4 / 883.4
// at 4096 (256 rows); dequantizing all 128 experts alone takes 534.5 us. The crossover is near
// 2048 tokens, 128 rows an expert. It is counted in rows per expert because the mma path's cost
// grows with the rows of each expert (it redoes the dequantization per row tile), while this
// path's is the experts' bytes: mixtral (E 8, k 2), whose mma path lost to BF16 from 256 tokens
// in docs/performance.md's tables, switches at 512 tokens. Only the qwen3 shape was timed.
inline constexpr int64_t kWna16DequantMinRowsPerExpert = 128;
inline bool wna16_dequant_chosen(int64_t tokens, int64_t top_k, int64_t experts) {
  return tokens * top_k >= kWna16DequantMinRowsPerExpert * experts;
}

// Whether the experts backends take wna16_wgmma for the grouped GEMMs of a layer (w13 over H,
// w2 over I) with max_rows pairs over `experts`, instead of the mma tile choose_wna16_gemm_kernel
// picks: above 16 rows an expert and below the large-M path's kWna16DequantMinRowsPerExpert,
// scale groups of 128 columns or more (or channel-wise), both matrices passing
// wna16_wgmma_check, and the sm_90a kernels loaded (`available`). Set by
//   moegraph bench moe --quant int4-g128 --shape qwen3-30b-a3b,mixtral --tokens 64,...,1536
//     --kernel auto,wna16_dequant,wna16_mma16,wna16_mma32,wna16_mma64,wna16_wgmma
//   moegraph bench moe --quant int4-g64 --shape gpt-oss-120b --tokens 256,512,1024,2048 (same)
// on an H200 (2026-12-04; docs/performance.md), µs best mma tile / wgmma: qwen3-30b-a3b g128 at
// 16 rows an expert (256 tokens) 276.4 / 403.1 (the 16-row tile stays), 32: 441.4 / 426.7, 48:
// 498.0 / 455.1, 64: 722.3 / 631.7, 96: 974.4 / 838.8; mixtral g128 at 16 rows (64 tokens)
// 588.3 / 685.2, 64: 1512.6 / 1214.8. gpt-oss-120b g64 (a promotion every 4 k16 steps, twice
// g128's drains) at 32 rows 2047.1 / 2102.0 and 64 rows 3032.5 / 3117.8: groups below 128 keep
// the mma tiles. The layer bench has wgmma ahead of the large-M path at 128 rows too (qwen3 2048
// tokens 1108.8 / 1031.7), but the whole 48-layer qwen3-30b-a3b int4-g128 model's 2048-token
// prefill ran 40833 tokens/s on the large-M path and 31062 with wgmma (`bench e2e`, alternated
// with MG_WNA16_WGMMA=0 / 1), so the large-M path keeps its threshold.
inline bool wna16_wgmma_chosen(int64_t max_rows, int64_t experts, const Wna16Weights& w13,
                               int64_t hidden, const Wna16Weights& w2, int64_t inter,
                               bool available) {
  const int64_t e = experts > 0 ? experts : 1;
  const auto groups_ok = [](const Wna16Weights& w) { return w.groups == 1 || w.group_size >= 128; };
  return available && max_rows > 16 * e && max_rows < kWna16DequantMinRowsPerExpert * e &&
         groups_ok(w13) && groups_ok(w2) && wna16_wgmma_check(w13, hidden, max_rows, e).empty() &&
         wna16_wgmma_check(w2, inter, max_rows, e).empty();
}

// Bytes of dense T weights (w13 and w2 of a chunk's experts) the path may hold at once: 1 GiB
// keeps the workspace of the largest layers small next to their packed weights (DeepSeek-V3's
// 256 experts of 7168 x 2048 x 3 would take 22 GB dense: 12 experts a chunk here) while a chunk
// still holds enough experts (qwen3-30b-a3b: 64 of 128, 2 chunks) that each grouped GEMM fills
// the GPU; a chunk is never less than one expert, whatever the budget.
inline constexpr int64_t kWna16DequantBudgetBytes = int64_t{1} << 30;

// How the experts are split: `chunks` launches of at most `experts_per_chunk` experts (balanced:
// ceil(E / chunks)), as many as fit budget_bytes of dense weights (at least one).
struct Wna16DequantChunks {
  int64_t experts_per_chunk = 0;
  int64_t chunks = 0;
};

inline Wna16DequantChunks wna16_dequant_chunks(int64_t num_experts, int64_t hidden, int64_t inter,
                                               bool gated, size_t element_bytes,
                                               int64_t budget_bytes) {
  if (num_experts <= 0) return {};
  const int64_t per_expert =
      ((gated ? 2 : 1) * inter * hidden + hidden * inter) * static_cast<int64_t>(element_bytes);
  int64_t fit = per_expert > 0 ? budget_bytes / per_expert : num_experts;
  fit = fit < 1 ? 1 : (fit > num_experts ? num_experts : fit);
  const int64_t chunks = (num_experts + fit - 1) / fit;
  return {(num_experts + chunks - 1) / chunks, chunks};
}

// One matrix (or a range of its experts) dequantized into the dense layout. All device pointers.
struct Wna16DequantArgs {
  Wna16Weights w;               // [E, parts * n, k] packed
  const float* bias = nullptr;  // [E, parts * n] F32, or null
  int64_t expert_begin = 0;     // the first expert of w written
  int64_t expert_count = 0;     // experts written
  // [expert_count + 1] row offsets of those experts (as GroupedGemmArgs), or null: all written.
  // An expert with no rows is skipped (its output left as it was).
  const int32_t* expert_offsets = nullptr;
  int64_t n = 0;             // rows of one part (unpadded)
  int64_t k = 0;             // columns, a multiple of 8
  void* out = nullptr;       // [expert_count, parts * n, k] T, 16-byte aligned
  void* bias_out = nullptr;  // [expert_count, parts * n] T (when bias is set)
};

// T = __nv_bfloat16 or __half (instantiated in wna16_dequant_<dtype>.cu, every code kind each).
// One launch; no host sync.
template <typename T>
void launch_wna16_dequantize(const Wna16DequantArgs& args, cudaStream_t stream);

// The expert MLP of section 3 over dequantized weights: out[r] = GEMM2(act(GEMM1(x_perm[r])))
// (+ b2) for every permuted row r of the alignment, b2 included (the caller combines as after
// launch_wna16_expert_mlp).
struct Wna16DequantMlpArgs {
  const void* x = nullptr;  // [tokens, H] T (not permuted; gathered by the call)
  int64_t tokens = 0;
  int64_t top_k = 1;
  MoEAlignment align;  // launch_moe_align's output over num_experts local experts
  int64_t num_experts = 0;
  int64_t hidden = 0;          // H
  int64_t inter = 0;           // I
  Wna16Weights w13;            // parts 2 gated / 1 plain, [E, N1, H]
  const float* b13 = nullptr;  // [E, N1] F32 or null
  Wna16Weights w2;             // [E, H, I]
  const float* b2 = nullptr;   // [E, H] F32 or null
  MoEActParams act;
  GroupedGemmKernel gemm1 = GroupedGemmKernel::kMma64;  // the BF16 kernels (the caller's choice)
  GroupedGemmKernel gemm2 = GroupedGemmKernel::kMma32;
  int64_t budget_bytes = kWna16DequantBudgetBytes;  // tests pass less to force several chunks
  void* scratch = nullptr;                          // wna16_dequant_mlp_scratch_bytes
  void* h = nullptr;    // [tokens * top_k, I] T (wna16_expert_mlp_scratch_bytes)
  void* out = nullptr;  // [tokens * top_k, H] T: each permuted row's expert output
};

// The scratch of launch_wna16_dequant_expert_mlp: the gathered rows [P, H] and one chunk's dense
// w13, w2 and biases, each 256-byte aligned.
size_t wna16_dequant_mlp_scratch_bytes(int64_t max_rows, int64_t num_experts, int64_t hidden,
                                       int64_t inter, bool gated, size_t element_bytes,
                                       int64_t budget_bytes = kWna16DequantBudgetBytes);

// 1 + 4 launches per chunk (gather; per chunk: two dequantizations, two grouped GEMMs); no host
// sync, no allocation. Throws mg::Error for shapes the grouped GEMMs refuse.
template <typename T>
void launch_wna16_dequant_expert_mlp(const Wna16DequantMlpArgs& args, cudaStream_t stream);

}  // namespace mg::cuda
