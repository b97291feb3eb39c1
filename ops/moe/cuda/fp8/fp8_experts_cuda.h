// CUDA kernels of the FP8 (W8A8, DeepSeek-V3 block-scaled) MoE experts, host side. Host-only
// header: the kernels live in the .cuh files beside it and are instantiated per activation dtype
// (T = __nv_bfloat16 or __half; F32 activations are refused, see fp8_activation_dtype_check) in
// the fp8_*_<dtype>.cu files.
//
// The math, which the CPU reference follows (framework/core/fp8.h):
//   weights      W [E, N, K] e4m3 codes, row-major, each expert's matrix [out, in] (y = x Wᵀ);
//                real W[e, n, k] = e4m3(W[e, n, k]) * S[e, n / block_n, k / block_k],
//                S [E, ceil(N / block_n), ceil(K / block_k)] F32 (Fp8WeightScales).
//   activations  every row quantised per 128-channel group exactly as quantize_fp8_e4m3_group:
//                scale = max(amax, 1e-10) / 448, q = e4m3(x / scale) (RNE), the last group
//                partial when K % 128 != 0; codes [rows, K] u8, scales [rows, ceil(K / 128)] F32.
//                Or per token (per_token: the whole row one group, scales [rows, 1]).
//   GEMM         out[m, n] = Σ_kb (Σ_{k in kb} xq[m, k] wq[n, k]) · xs[m, kb] · S[e, n / bn, kbw]
//                with kbw = kb * 128 / bk (xs[m, 0] for every kb per token), summed
//                over the 128-wide K blocks kb, in fp32 (the block scales are applied per K block
//                into fp32 accumulators, as DeepGEMM and vLLM do), then the epilogue and one
//                rounding to T.
//   expert MLP   h = act(GEMM1(xq, w13) + b13) rounded to T (N1 = 2I gated: gate rows, then up
//                rows; I plain), hq = quant(h) (same grouping as x), y = GEMM2(hq, w2) + b2 rounded
//                to T. The intermediate is rounded to T before it is quantised, as vLLM's
//                per_token_group_quant_fp8 on its BF16 activation output does.
// Every launcher neither syncs nor allocates (scratch comes from the caller) and can be captured
// in a CUDA graph. The kernels need sm_89+ (FP8 mma.sync); the build targets sm_90a/sm_90.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "ops/moe/cuda/grouped_gemm_cuda.h"
#include "ops/moe/cuda/moe_cuda_types.h"

namespace mg::cuda {

// Channels per activation quantisation group, and the K step at which the GEMMs apply scales.
inline constexpr int64_t kFp8Group = 128;

// 128-channel groups of a K-wide row: the columns of an activation scale tensor.
MG_HOST_DEVICE inline constexpr int64_t fp8_groups(int64_t k) {
  return (k + kFp8Group - 1) / kFp8Group;
}

// Columns of an activation scale tensor: one per 128 group, or one per token when the whole row is
// one group (per-token dynamic quantisation, compressed-tensors' "token" strategy).
MG_HOST_DEVICE inline constexpr int64_t fp8_act_scale_cols(int64_t k, bool per_token) {
  return per_token ? 1 : fp8_groups(k);
}

// The scales of FP8 weights W [E, N, K]: S [E, ceil(N / block_n), ceil(K / block_k)] F32, and
// W[e, n, k] = e4m3(W) * S[e, n / block_n, k / block_k]. The layouts of the checkpoints:
//   block       (128, 128)  DeepSeek-V3, Qwen3-FP8 (weight_block_size [128, 128])
//   per-tensor  (N, K)      S [E, 1, 1]
//   per-channel (1, K)      S [E, N, 1]
// The GEMMs step K by 128, so block_k must be a multiple of 128 or cover all of K
// (fp8_weight_scales_check).
struct Fp8WeightScales {
  const float* scales = nullptr;  // device
  int64_t block_n = 128;
  int64_t block_k = 128;
};

// "" when (block_n, block_k) can scale a [N, K] weight in these kernels, else the reason.
inline std::string fp8_weight_scales_check(int64_t block_n, int64_t block_k, int64_t n, int64_t k) {
  if (block_n <= 0 || block_k <= 0) {
    return "FP8 weight scale blocks " + std::to_string(block_n) + " x " + std::to_string(block_k) +
           " must be positive";
  }
  if (block_k % kFp8Group != 0 && block_k < k) {
    return "FP8 weight scale block_k " + std::to_string(block_k) +
           " must be a multiple of 128 or cover all of K " + std::to_string(k) +
           " (the kernels apply scales per 128-wide K block)";
  }
  (void)n;
  return "";
}

// "" when T is an activation dtype the FP8 kernels take: BF16 and F16 (the dtype of x, of the
// intermediate and of the outputs). F32 is refused: an FP8 model runs with 16-bit activations and
// fp32 would only double the traffic of the quantisation and the epilogues.
inline std::string fp8_activation_dtype_check(size_t element_bytes) {
  if (element_bytes == 2) return "";
  return "FP8 experts take BF16 or F16 activations, not " + std::to_string(element_bytes) +
         "-byte elements (F32 is not supported)";
}

// ---------------------------------------------------------------------------------------------
// 1. Activation quantisation fused with the gather of rows by permutation.

struct Fp8QuantArgs {
  const void* x = nullptr;  // [tokens, K] T
  // [max_rows] device or null: row r quantises x[row_to_pair[r] / top_k] (MoEAlignment's
  // row_to_pair), so the permuted T copy is never written; null: row r quantises x[r].
  const int32_t* row_to_pair = nullptr;
  int64_t top_k = 1;
  // Device scalar or null: only rows [0, *num_rows) are written (e.g. expert_offsets + E_local);
  // null: all max_rows rows.
  const int32_t* num_rows = nullptr;
  int64_t max_rows = 0;    // host bound of the rows (grid size)
  int64_t k = 0;           // channels; a multiple of 16 (fp8_gemm_check)
  bool per_token = false;  // one group per row instead of per 128 channels
  // Device scalar or null: a static activation scale (compressed-tensors' static input_scale;
  // needs per_token). Every row is quantised as e4m3(clamp(x / scale, -448, 448)) and gets this
  // scale in xs, so the GEMMs take it as per-token scales.
  const float* static_scale = nullptr;
  uint8_t* xq = nullptr;  // [max_rows, K] e4m3 codes
  float* xs = nullptr;    // [max_rows, fp8_act_scale_cols(K, per_token)] scales
};

// One warp per row (per 128 group or per token). Codes and scales equal quantize_fp8_e4m3_group's
// (over the group, or the whole row) bit for bit.
template <typename T>
void launch_fp8_quantize(const Fp8QuantArgs& args, cudaStream_t stream);

// ---------------------------------------------------------------------------------------------
// 2. The FP8 grouped GEMM (mma.sync m16n8k32 e4m3, fp32 accumulators promoted per K block).

// The kernel variants, named so a caller can force one.
enum class Fp8GemmKernel : int32_t {
  kMma16,  // mma.sync, 16-row tiles (decode-sized groups: few rows per expert)
  kMma64,  // mma.sync, 64-row tiles
  kWgmma,  // wgmma m64n128k32, 128-row tiles; sm_90a only (grouped_gemm_sm90a_kernels())
  // The same wgmma tile fed by TMA, warp-specialised and persistent; sm_90a only, and the shapes
  // its boxes fit (fp8_tma_shape_check).
  kTma,
  // kTma's kernel on 64-row tiles: two independent pipelines (producer warp, consumer warpgroup,
  // stages) per CTA; the same limits.
  kTma64,
};

inline constexpr Fp8GemmKernel kAllFp8GemmKernels[] = {Fp8GemmKernel::kMma16, Fp8GemmKernel::kMma64,
                                                       Fp8GemmKernel::kWgmma, Fp8GemmKernel::kTma,
                                                       Fp8GemmKernel::kTma64};

// The kernels fed by TMA (fp8_gemm_tma.cuh): their boxes must fit the GEMM (fp8_tma_shape_check).
constexpr bool is_fp8_tma_kernel(Fp8GemmKernel kernel) {
  return kernel == Fp8GemmKernel::kTma || kernel == Fp8GemmKernel::kTma64;
}

constexpr std::string_view fp8_gemm_kernel_name(Fp8GemmKernel kernel) {
  switch (kernel) {
    case Fp8GemmKernel::kMma16:
      return "fp8_mma16";
    case Fp8GemmKernel::kMma64:
      return "fp8_mma64";
    case Fp8GemmKernel::kWgmma:
      return "fp8_wgmma";
    case Fp8GemmKernel::kTma:
      return "fp8_tma";
    case Fp8GemmKernel::kTma64:
      return "fp8_tma64";
  }
  return "?";
}

// "" when `kernel` can run on a GPU whose binary has (sm90a) or lacks the sm_90a code
// (grouped_gemm_sm90a_kernels()), else the reason; the launchers refuse it with the same words.
// This is the kernel level only: fp8_wgmma runs here (its kernel tests force it), while the
// backend's kernel choice keeps it out of models until it is enabled there
// (ops/moe/heuristics/fp8_kernel_choice.cc, check_fp8_kernel_request).
inline std::string fp8_gemm_kernel_check(Fp8GemmKernel kernel, bool sm90a) {
  switch (kernel) {
    case Fp8GemmKernel::kMma16:
    case Fp8GemmKernel::kMma64:
      return "";
    case Fp8GemmKernel::kWgmma:
      return sm90a ? "" : "fp8_wgmma needs the sm_90a kernels, which this GPU or build lacks";
    case Fp8GemmKernel::kTma:
    case Fp8GemmKernel::kTma64:
      return sm90a ? ""
                   : std::string(fp8_gemm_kernel_name(kernel)) +
                         " needs the sm_90a kernels, which this GPU or build lacks";
  }
  return "unknown FP8 GEMM kernel";
}

// The kernel named `name` ("fp8_mma16", "fp8_mma64", "fp8_wgmma"), or nullopt.
inline std::optional<Fp8GemmKernel> parse_fp8_gemm_kernel(std::string_view name) {
  for (Fp8GemmKernel kernel : kAllFp8GemmKernels) {
    if (fp8_gemm_kernel_name(kernel) == name) return kernel;
  }
  return std::nullopt;
}

// All pointers device pointers; a, b and c 16-byte aligned.
struct Fp8GemmArgs {
  const uint8_t* a = nullptr;       // [max_rows, K] e4m3 (rows permuted by expert)
  const float* a_scales = nullptr;  // [max_rows, fp8_act_scale_cols(K, a_per_token)]
  bool a_per_token = false;         // one activation scale per row
  const uint8_t* b = nullptr;       // [E, N_b, K] e4m3; N_b = 2N gated (gate, up rows), else N
  Fp8WeightScales b_scales;         // S [E, ceil(N_b / block_n), ceil(K / block_k)]
  const float* bias = nullptr;      // [E, N_b] F32 or null
  void* c = nullptr;                // [max_rows, N] T
  const int32_t* expert_offsets = nullptr;  // [E + 1] DEVICE, as GroupedGemmArgs
  int64_t num_experts = 0;
  int64_t max_rows = 0;                               // host-known upper bound of offsets[E]
  int64_t n = 0;                                      // N: output columns
  int64_t k = 0;                                      // K: a multiple of 16
  GroupedEpilogue epilogue = GroupedEpilogue::kBias;  // kActivation: GEMM1 (gated or plain)
  MoEActParams act;
};

// True when the TMA kernels' weight tiles (128 weight rows: 64 gate + 64 up rows when gated, 128
// rows when plain, starting at a multiple of 64 / 128) each take one weight scale for all their
// gate (or plain) rows and one for all their up rows, so the consumers promote with those two
// alone (fp8_gemm_tma.cuh): the scale blocks of block_n rows hold whole tile halves, or one block
// spans every row (per tensor). Rows past N read row N - 1's scale, which then shares the block.
inline bool fp8_tma_weight_scales_uniform(int64_t n, int64_t block_n, bool gated) {
  if (block_n <= 0) return false;
  const int64_t half_rows = gated ? 64 : 128;
  return block_n >= (gated ? 2 : 1) * n || (block_n % half_rows == 0 && (!gated || n % 64 == 0));
}

// The rows of the A box (one consumer warpgroup's): fewer rows in all do not fit it.
inline constexpr int64_t kFp8TmaMinRows = 64;

// "" when the TMA kernels' boxes (fp8_tma, fp8_tma64) fit a GEMM of N outputs over K with max_rows
// rows (the driver rejects a box larger than its tensor: K >= 128, >= 64 rows, N >= 128 plain or 64
// gated weight rows) and its scale offsets fit 32 bits, else the reason. The expert MLP runs each
// GEMM that fails it on fp8_wgmma instead.
inline std::string fp8_tma_shape_check(int64_t n, int64_t k, int64_t max_rows, int64_t num_experts,
                                       int64_t block_n, int64_t block_k, bool gated) {
  const int64_t box_rows = gated ? 64 : 128;
  if (k < 128 || max_rows < kFp8TmaMinRows || n < box_rows) {
    return "fp8_tma's and fp8_tma64's boxes need K >= 128, >= 64 rows and N >= " +
           std::to_string(box_rows) + ", not K " + std::to_string(k) + ", " +
           std::to_string(max_rows) + " rows, N " + std::to_string(n);
  }
  if (block_n <= 0 || block_k <= 0) {
    return "FP8 weight scale blocks " + std::to_string(block_n) + " x " + std::to_string(block_k) +
           " must be positive";
  }
  const int64_t n_b = gated ? 2 * n : n;
  const int64_t scale_count =
      num_experts * ((n_b + block_n - 1) / block_n) * ((k + block_k - 1) / block_k);
  if (scale_count >= (int64_t{1} << 31) || max_rows * ((k + 127) / 128) >= (int64_t{1} << 31)) {
    return "fp8_tma and fp8_tma64 index scales with 32-bit offsets: " +
           std::to_string(num_experts) + " experts of " + std::to_string(n_b) + " x " +
           std::to_string(k) + " and " + std::to_string(max_rows) + " rows need more";
  }
  return "";
}

// "" when the FP8 kernels take a GEMM with N outputs over K, else the reason: every row is read in
// 16-byte vectors of 16 codes, so K must be a multiple of 16.
inline std::string fp8_gemm_check(int64_t n, int64_t k) {
  if (n <= 0 || k <= 0) {
    return "FP8 GEMM N " + std::to_string(n) + " and K " + std::to_string(k) + " must be positive";
  }
  if (k % 16 != 0) {
    return "FP8 GEMM K " + std::to_string(k) +
           " must be a multiple of 16 (rows are read in 16-byte vectors of e4m3 codes)";
  }
  if (n > (int64_t{1} << 30) || k > (int64_t{1} << 30)) {
    return "FP8 GEMM N " + std::to_string(n) + " and K " + std::to_string(k) +
           " must fit 32-bit indices";
  }
  return "";
}

// c[r, :] = epilogue(Σ_kb ...) for the rows of every expert; rows of c outside
// [offsets[0], offsets[E]) are not written. An unsupported shape or scale layout is an mg::Error.
template <typename T>
void launch_fp8_grouped_gemm(const Fp8GemmArgs& args, Fp8GemmKernel kernel, cudaStream_t stream);

// ---------------------------------------------------------------------------------------------
// The expert MLP on permuted rows: quantise-gather, GEMM1 + activation, quantise, GEMM2.

struct Fp8ExpertMlpArgs {
  const void* x = nullptr;               // [tokens, H] T (not permuted)
  const int32_t* row_to_pair = nullptr;  // [max_rows] (MoEAlignment) or null: x is permuted
  int64_t top_k = 1;
  const int32_t* expert_offsets = nullptr;  // [E + 1] device; offsets[0] == 0
  int64_t num_experts = 0;
  int64_t max_rows = 0;          // host bound of offsets[E] (e.g. tokens * top_k)
  int64_t hidden = 0;            // H
  int64_t inter = 0;             // I
  const uint8_t* w13 = nullptr;  // [E, N1, H] e4m3, N1 = 2I gated / I plain
  Fp8WeightScales s13;
  const float* b13 = nullptr;   // [E, N1] F32 or null
  const uint8_t* w2 = nullptr;  // [E, H, I] e4m3
  Fp8WeightScales s2;
  const float* b2 = nullptr;  // [E, H] F32 or null
  MoEActParams act;
  bool act_per_token = false;  // activation scales per token (x and h), else per 128 group
  // Device scalars or null: static activation scales of GEMM1's input x and GEMM2's input h
  // (need act_per_token; Fp8QuantArgs::static_scale).
  const float* x_static_scale = nullptr;
  const float* h_static_scale = nullptr;
  void* out = nullptr;      // [max_rows, H] T: each permuted row's expert output (for combine)
  void* scratch = nullptr;  // fp8_expert_mlp_scratch_bytes, 16-byte aligned
  size_t scratch_bytes = 0;
};

// Bytes of the scratch: xq [rows, H], xs [rows, g(H)], h [rows, I] T, hq [rows, I], hs [rows,
// g(I)], each 256-byte aligned.
size_t fp8_expert_mlp_scratch_bytes(int64_t max_rows, int64_t hidden, int64_t inter,
                                    size_t element_bytes);
// Where h (the intermediate [rows, I] in T, after GEMM1's epilogue) starts in that scratch: tests
// read it back to check GEMM1 and GEMM2 apart.
size_t fp8_expert_mlp_scratch_h_offset(int64_t max_rows, int64_t hidden);

// "" when the MLP kernels take (hidden, inter) and the scale layouts, else the reason.
std::string fp8_expert_mlp_check(int64_t hidden, int64_t inter, bool gated,
                                 const Fp8WeightScales& s13, const Fp8WeightScales& s2);

// Four launches; `kernel` picks the GEMM tile of both GEMMs (fp8_tma, fp8_tma64: of each GEMM its
// boxes fit, fp8_wgmma for the other).
template <typename T>
void launch_fp8_expert_mlp(const Fp8ExpertMlpArgs& args, Fp8GemmKernel kernel, cudaStream_t stream);

// ---------------------------------------------------------------------------------------------
// 3. Decode (M <= kFp8DecodeMaxTokens): per (token, expert) pair, weights read once.

inline constexpr int64_t kFp8DecodeMaxTokens = 8;
inline constexpr std::string_view kFp8DecodeKernelName = "fp8_decode";

// As DecodeExpertsArgs (ops/moe/cuda/decode_experts_cuda.h), with FP8 weights.
struct Fp8DecodeArgs {
  const void* x = nullptr;              // [M, H] T
  const int32_t* topk_ids = nullptr;    // [M, k] global expert ids (device)
  const float* topk_weights = nullptr;  // [M, k] (device)
  const int32_t* expert_map = nullptr;  // [E] global -> local id (< kMaxRouteExperts) or -1
  int identity_experts = 0;      // > 0: expert_map[i] == i for all E = identity_experts (not read)
  const uint8_t* w13 = nullptr;  // [E_local, N1, H] e4m3
  Fp8WeightScales s13;
  const float* b13 = nullptr;   // [E_local, N1] F32 or null
  const uint8_t* w2 = nullptr;  // [E_local, H, I] e4m3
  Fp8WeightScales s2;
  const float* b2 = nullptr;  // [E_local, H] F32 or null
  void* out = nullptr;      // [M, H] T: out[t] = Σ_j w[t, j] (y_pair + b2), fp32 sum, one rounding
  void* scratch = nullptr;  // fp8_decode_scratch_bytes, 16-byte aligned
  size_t scratch_bytes = 0;
  int64_t num_tokens = 0, top_k = 0, hidden = 0, inter = 0;
  MoEActParams act;
  bool act_per_token = false;  // activation scales per token (x and h), else per 128 group
  const float* x_static_scale = nullptr;  // as Fp8ExpertMlpArgs
  const float* h_static_scale = nullptr;
};

// The scratch of the decode path: byte offsets of xq [M, H], xs [M, g(H)] F32, h [M k, I] T,
// hq [M k, I] and hs [M k, g(I)] F32, each 256-byte aligned, and the total.
struct Fp8DecodeScratchLayout {
  size_t xq = 0, xs = 0, h = 0, hq = 0, hs = 0, total = 0;
};
inline Fp8DecodeScratchLayout fp8_decode_scratch_layout(int64_t num_tokens, int64_t top_k,
                                                        int64_t hidden, int64_t inter,
                                                        size_t element_bytes) {
  const auto align = [](size_t bytes) { return (bytes + 255) / 256 * 256; };
  const auto tokens = static_cast<size_t>(num_tokens);
  const auto pairs = static_cast<size_t>(num_tokens * top_k);
  Fp8DecodeScratchLayout l;
  l.xs = l.xq + align(tokens * hidden);
  l.h = l.xs + align(tokens * fp8_groups(hidden) * sizeof(float));
  l.hq = l.h + align(pairs * inter * element_bytes);
  l.hs = l.hq + align(pairs * inter);
  l.total = l.hs + align(pairs * fp8_groups(inter) * sizeof(float));
  return l;
}
inline size_t fp8_decode_scratch_bytes(int64_t num_tokens, int64_t top_k, int64_t hidden,
                                       int64_t inter, size_t element_bytes) {
  return fp8_decode_scratch_layout(num_tokens, top_k, hidden, inter, element_bytes).total;
}

// "" when the decode kernels take the problem, else the reason.
std::string fp8_decode_check(int64_t num_tokens, int64_t top_k, int64_t hidden, int64_t inter,
                             bool gated, const Fp8WeightScales& s13, const Fp8WeightScales& s2);

// Four launches (quantise x, up + activation, quantise h, down + combine). Per-pair math equals
// the GEMM path's: the same codes, block sums scaled per 128-K block in fp32, h rounded to T.
template <typename T>
void launch_fp8_decode_experts(const Fp8DecodeArgs& args, cudaStream_t stream);

}  // namespace mg::cuda
