// The decode path of the packed weight-only experts (ops/moe/cuda/wna16/wna16_decode_cuda.h):
// launch_wna16_decode_experts forced at M = 1, 2, 3, 5, 8 and 16 tokens, against
// - an fp64 reference on the weights the packed matrices hold (wna16_unpack_host: fma(q, s, -z·s)
//   for INT4 / INT8, e2m1 x scale byte (x global) for MXFP4 / NVFP4), rounded through T where the
//   kernels round them (the per-value path; the exact paths, integer codes with integer zero points
//   and every FP4 matrix, never round a weight, so their reference takes them unrounded), the
//   intermediate rounded to T, the weighted top-k sum in fp64;
// - the existing path on the same packed weights (align -> mma.sync GEMM1 + act -> GEMM2 ->
//   combine, wna16_mma16), which rounds the weights to T on its per-value path (F16 MXFP4, integer
//   codes with real zero points), with the bounds widened by what that rounding moves the
//   reference;
// and eager against a replayed CUDA graph (bit for bit). Cases: INT4 and INT8 with groups of 32
// and 128 columns and channel-wise, symmetric and asymmetric; MXFP4 and NVFP4 (globals != 1 per
// expert and part, partial last scale groups); H and I not multiples of 64 / 128 where the
// packer allows (H 72, 328; I 136, 160, 200, 2056); gated and plain activations, SwiGLU-OAI with
// biases; experts that get no token and a token whose experts are all on other ranks (zeros);
// BF16 and F16. A wrong nibble, a scale of the wrong group or half, a missed global, a swapped
// gate / up or a pair written to the wrong row moves the results by tens of percent.
// The backend's wiring (route -> decode, `:wna16_decode` forced) is covered by
// CudaWna16Experts.BackendMatchesReferenceLayer and CudaFp4Experts' backend test.
//
// MG_WNA16_FORCE_PER_VALUE=1 runs every integer case through the per-value path instead; a
// failing case prints its first bad element with both paths' values (explain_decode_failure).
// Timing (MG_WNA16_TIMING=1, prints only): CudaWna16Decode.Timing* on the qwen3-30b-a3b shape
// (INT4 and INT8 g128) and gpt-oss-120b (MXFP4).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "tests/cuda/cuda_test_util.h"
#include "tests/cuda/moe_kernel_test_util.h"
#include "tools/bench/decode_floor.h"

#ifdef MG_WITH_CUDA
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include "framework/core/fp4_scale_bytes.h"
#include "ops/moe/cuda/moe_align_cuda.h"
#include "ops/moe/cuda/wna16/wna16_decode_cuda.h"
#include "ops/moe/cuda/wna16/wna16_experts_cuda.h"
#endif

namespace mg {
namespace {

#ifdef MG_WITH_CUDA

using cuda::MoEActKind;
using cuda::MoEActParams;
using cuda::Wna16Codes;
using testing::compare_bounded;
using testing::device_copy;
using testing::DeviceBuffer;
using testing::reference_activation;
using testing::run_eager_and_graph;

float to_f32(__half x) {
  return __half2float(x);
}
float to_f32(__nv_bfloat16 x) {
  return __bfloat162float(x);
}
template <typename T>
T from_f32(float x) {
  if constexpr (std::is_same_v<T, __half>) {
    return __float2half_rn(x);
  } else {
    return __float2bfloat16_rn(x);
  }
}
template <typename T>
float round_to(double x) {
  return to_f32(from_f32<T>(static_cast<float>(x)));
}

// ---- Packed matrices of every code kind ------------------------------------------------------

enum class Kind { kInt4, kInt8, kMxfp4, kNvfp4 };

const char* kind_label(Kind k) {
  switch (k) {
    case Kind::kInt4:
      return "int4";
    case Kind::kInt8:
      return "int8";
    case Kind::kMxfp4:
      return "mxfp4";
    case Kind::kNvfp4:
      return "nvfp4";
  }
  return "?";
}

// One packed matrix [E, rows, cols] on the device and the weights it holds ([E, rows, cols] F32):
// `ref` rounded through T where the per-value kernels (and the grouped GEMM) round them: integer
// and MXFP4 weights are rounded to T once; NVFP4's e2m1 x e4m3 is exact in T and its global
// multiplies the fp32 accumulator. `exact` as the decode kernels' integer-code path uses them
// (Wna16Zeros::kIntegerCodes: s · (q - z) applied to the fp32 sum, never rounded to T): the
// unpacked fma(q, s, -z·s). The two differ by up to 2^-9 of a weight in BF16 (2^-12 in F16), and
// that rounding error is one value per code q - z and scale group, so it does not average out
// along K: single outputs of the BF16 cases move by several times the bounds below.
struct PackedMatrix {
  std::vector<float> ref, exact;
  std::unique_ptr<DeviceBuffer> words, params, scale_bytes, globals;
  cuda::Wna16Weights view;
};

// real_zeros (asymmetric integer codes only): the zero points moved off the integers by 0.37, so
// the packer must mark them Wna16Zeros::kReal and the decode kernels take the per-value path.
template <typename T>
PackedMatrix make_matrix(Kind kind, int64_t E, int64_t rows, int64_t cols, int64_t group,
                         bool symmetric, int64_t parts, std::mt19937& rng,
                         bool real_zeros = false) {
  cuda::Wna16PackedHost packed;
  if (kind == Kind::kInt4 || kind == Kind::kInt8) {
    std::uniform_real_distribution<float> value(-0.5f, 0.5f);
    std::vector<float> w(E * rows * cols);
    for (float& v : w) v = value(rng);
    cuda::Wna16HostCodes q = cuda::wna16_quantize_host(
        w.data(), E, rows, cols, kind == Kind::kInt4 ? 4 : 8, group, symmetric);
    if (real_zeros) {
      for (float& z : q.zeros) z += 0.37f;
    }
    packed = cuda::wna16_pack(q.view(), parts);
    // The decode kernels' choice: exact q - z for integer zero points (every case but real_zeros).
    EXPECT_EQ(packed.zeros, real_zeros ? cuda::Wna16Zeros::kReal : cuda::Wna16Zeros::kIntegerCodes);
  } else {
    const bool mx = kind == Kind::kMxfp4;
    std::vector<uint8_t> codes(E * rows * cols / 2);
    std::uniform_int_distribution<int> byte(0, 255);
    for (uint8_t& b : codes) b = static_cast<uint8_t>(byte(rng));
    const int64_t G = (cols + group - 1) / group;
    std::vector<float> scales(E * rows * G), globals(E * parts, 1.0f);
    const float base = 2.0f / (6.0f * std::sqrt(static_cast<float>(cols)));
    if (mx) {
      const int e0 = static_cast<int>(std::floor(std::log2(base)));
      std::uniform_int_distribution<int> exp(e0 - 1, e0 + 1);
      for (float& s : scales) s = std::ldexp(1.0f, exp(rng));
    } else {
      // E4M3 codes 0.25 .. 4 times a global per expert and part that is not a power of two.
      std::uniform_int_distribution<int> code(0x28, 0x48);
      std::uniform_real_distribution<float> factor(0.7f, 1.3f);
      for (float& g : globals) g = base * factor(rng);
      const int64_t part_rows = rows / parts;
      for (int64_t e = 0; e < E; ++e) {
        for (int64_t r = 0; r < rows; ++r) {
          const float g = globals[e * parts + r / part_rows];
          for (int64_t j = 0; j < G; ++j) {
            scales[(e * rows + r) * G + j] =
                mg::e4m3_scale_value(static_cast<uint8_t>(code(rng))) * g;
          }
        }
      }
    }
    packed = cuda::wna16_pack_e2m1(mx ? Wna16Codes::kMxfp4 : Wna16Codes::kNvfp4, codes.data(),
                                   scales.data(), mx ? nullptr : globals.data(), E, rows, cols,
                                   group, parts);
  }
  PackedMatrix m;
  m.ref = cuda::wna16_unpack_host(packed, rows);
  m.exact = m.ref;
  if (kind != Kind::kNvfp4) {
    for (float& v : m.ref) v = round_to<T>(v);
  }
  m.words = device_copy(packed.words);
  m.params = device_copy(packed.params);
  m.scale_bytes = device_copy(packed.scale_bytes);
  m.globals = device_copy(packed.globals);
  m.view = cuda::wna16_weights_view(
      packed, m.words->as<uint32_t>(), packed.params.empty() ? nullptr : m.params->as<float>(),
      packed.scale_bytes.empty() ? nullptr : m.scale_bytes->as<uint8_t>(),
      packed.globals.empty() ? nullptr : m.globals->as<float>());
  return m;
}

double dot(const float* x, const float* w, int64_t k) {
  double s = 0.0;
  for (int64_t i = 0; i < k; ++i) s += static_cast<double>(x[i]) * w[i];
  return s;
}

// ---- 1. The decode kernels against the reference and the grouped GEMM path --------------------

struct DecodeCase {
  Kind kind = Kind::kInt4;
  int64_t group = 128;  // columns per scale group; -1 channel-wise (integers)
  bool symmetric = true;
  int64_t experts = 8, top_k = 2, hidden = 256, inter = 128;
  MoEActKind act = MoEActKind::kSiluGated;
  bool bias = false;
  bool real_zeros = false;  // asymmetric integer codes: zero points off the integers (make_matrix)
  std::string describe() const {
    return fmt::format("{} group {} {} E {} top_k {} H {} I {} act {} bias {}", kind_label(kind),
                       group,
                       real_zeros  ? "asym-f32"
                       : symmetric ? "sym"
                                   : "asym",
                       experts, top_k, hidden, inter, static_cast<int>(act), bias);
  }
};

// The tile choices the timing test sweeps, each one checked by EveryTileVariantMatches (0 fields
// are the launcher's defaults).
struct TileVariant {
  const char* name;
  cuda::Wna16DecodeTiles tiles;
};

std::vector<TileVariant> tile_variants() {
  std::vector<TileVariant> v;
  const auto add = [&](const char* name, const auto& set) {
    TileVariant t{name, {}};
    set(t.tiles);
    v.push_back(t);
  };
  add("default", [](cuda::Wna16DecodeTiles&) {});
  add("up slices 1", [](cuda::Wna16DecodeTiles& t) { t.up_k_slices = 1; });
  add("up slices by the rule", [](cuda::Wna16DecodeTiles& t) { t.up_k_slices = 0; });
  add("up slices 4", [](cuda::Wna16DecodeTiles& t) { t.up_k_slices = 4; });
  add("up slices 8", [](cuda::Wna16DecodeTiles& t) { t.up_k_slices = 8; });
  add("up 1 block per CTA", [](cuda::Wna16DecodeTiles& t) { t.up_blocks_per_cta = 1; });
  add("up 4 slices x 4 blocks", [](cuda::Wna16DecodeTiles& t) {
    t.up_k_slices = 4;
    t.up_blocks_per_cta = 4;
  });
  add("up slots 8", [](cuda::Wna16DecodeTiles& t) { t.up_expert_slots = 8; });
  add("up slots 16", [](cuda::Wna16DecodeTiles& t) { t.up_expert_slots = 16; });
  add("up slots 64", [](cuda::Wna16DecodeTiles& t) { t.up_expert_slots = 64; });
  add("down slices 1", [](cuda::Wna16DecodeTiles& t) { t.down_k_slices = 1; });
  add("down slices 2", [](cuda::Wna16DecodeTiles& t) { t.down_k_slices = 2; });
  add("down slices 4", [](cuda::Wna16DecodeTiles& t) { t.down_k_slices = 4; });
  add("down warps 4", [](cuda::Wna16DecodeTiles& t) { t.down_warps = 4; });
  add("down warps 16", [](cuda::Wna16DecodeTiles& t) { t.down_warps = 16; });
  add("down 2 blocks", [](cuda::Wna16DecodeTiles& t) { t.down_blocks_per_cta = 2; });
  // Odd everything: partial last CTAs and slices, warps that get no item.
  add("odd 3s", [](cuda::Wna16DecodeTiles& t) {
    t.up_k_slices = 3;
    t.up_blocks_per_cta = 3;
    t.up_expert_slots = 3;
    t.down_k_slices = 3;
    t.down_warps = 3;
    t.down_blocks_per_cta = 3;
  });
  add("down L2 prefetch", [](cuda::Wna16DecodeTiles& t) { t.down_prefetch_l2 = true; });
  add("no evict-first", [](cuda::Wna16DecodeTiles& t) { t.evict_first = false; });
  add("up x unstaged", [](cuda::Wna16DecodeTiles& t) { t.up_stage_x = false; });
  add("no PDL", [](cuda::Wna16DecodeTiles& t) { t.pdl = 0; });
  add("PDL", [](cuda::Wna16DecodeTiles& t) { t.pdl = 1; });
  // INT4 on the exact path and FP4 scaled in T (BF16 MXFP4, NVFP4) swap the mma's operands at
  // 2 .. 8 tokens by default; the kernels that do not (every other case takes them anyway), the
  // swapped ones at one token, and with one down block a CTA (an item's second block absent in
  // every CTA).
  add("not swapped", [](cuda::Wna16DecodeTiles& t) { t.swap_operands = 0; });
  add("swapped at 1 token too", [](cuda::Wna16DecodeTiles& t) { t.swap_operands = 1; });
  add("not swapped, up slices 1", [](cuda::Wna16DecodeTiles& t) {
    t.swap_operands = 0;
    t.up_k_slices = 1;
  });
  add("down 1 block", [](cuda::Wna16DecodeTiles& t) { t.down_blocks_per_cta = 1; });
  add("down 8 warps", [](cuda::Wna16DecodeTiles& t) { t.down_warps = 8; });
  add("up slices 4, down slices 1", [](cuda::Wna16DecodeTiles& t) {
    t.up_k_slices = 4;
    t.down_k_slices = 1;
  });
  add("up slices 3", [](cuda::Wna16DecodeTiles& t) { t.up_k_slices = 3; });
  // The sweep's later variants run faster than its first (the default): timed again, last.
  add("default (again, last)", [](cuda::Wna16DecodeTiles&) {});
  return v;
}

// MG_WNA16_FORCE_PER_VALUE set (not "0"): check_decode runs the decode kernels' per-value
// dequantization on every matrix (views' zeros = Wna16Zeros::kReal), as the test of that path
// alone and to tell the two paths apart when one fails.
bool force_per_value_from_env() {
  const char* v = std::getenv("MG_WNA16_FORCE_PER_VALUE");
  return v != nullptr && std::strcmp(v, "0") != 0;
}

// Whether the decode kernels take an exact path for `w` (int_path in wna16_decode_cuda.cuh: FP4
// codes, and integer codes whose zero points are all integer codes).
bool decode_uses_exact_codes(const cuda::Wna16Weights& w) {
  return cuda::wna16_decode_exact(w);
}

// What check_decode prints when the decode path misses its reference: the first element out of
// compare_bounded's bounds (token, column, the token's experts) with the decode result, its
// reference, the reference on the weights rounded to T, the grouped GEMM's result and, when `args`
// took the exact integer-code path for a matrix, the same launch through the per-value path (zeros
// kReal; FP4 has no other path), so one failing run shows which path is off, where, and by how
// much.
template <typename T>
std::string explain_decode_failure(const DecodeCase& c, int64_t tokens,
                                   const cuda::Wna16DecodeArgs& args,
                                   const std::vector<int32_t>& ids,
                                   const std::vector<int32_t>& expert_map,
                                   const std::vector<double>& got, const std::vector<double>& ref,
                                   const std::vector<double>& rounded,
                                   const std::vector<double>& gemm) {
  double ref2 = 0.0;
  for (const double r : ref) ref2 += r * r;
  const double rms = std::sqrt(ref2 / static_cast<double>(ref.size()));
  size_t bad = ref.size();
  for (size_t i = 0; i < ref.size() && bad == ref.size(); ++i) {
    if (!(std::fabs(got[i] - ref[i]) <= std::fabs(ref[i]) / 64 + rms / 64)) bad = i;
  }
  if (bad == ref.size()) return "(no element out of bounds: the normalised L2 failed)";
  const int64_t token = static_cast<int64_t>(bad) / c.hidden,
                col = static_cast<int64_t>(bad) % c.hidden;
  std::string experts;
  for (int64_t j = 0; j < c.top_k; ++j) {
    const int32_t id = ids[token * c.top_k + j];
    experts += fmt::format("{}{} (local {})", j == 0 ? "" : ", ", id, expert_map[id]);
  }
  std::string msg = fmt::format(
      "first element out of bounds: {} = token {} column {}, experts {}: decode {} reference {} "
      "(on the weights rounded to T: {}), grouped GEMM {}",
      bad, token, col, experts, got[bad], ref[bad], rounded[bad], gemm[bad]);
  if (args.w13.codes == Wna16Codes::kInteger &&
      (decode_uses_exact_codes(args.w13) || decode_uses_exact_codes(args.w2))) {
    cuda::Wna16DecodeArgs per_value = args;
    per_value.w13.zeros = cuda::Wna16Zeros::kReal;
    per_value.w2.zeros = cuda::Wna16Zeros::kReal;
    const size_t out_bytes = tokens * c.hidden * sizeof(T);
    DeviceBuffer d_out(out_bytes);
    per_value.out = d_out.as<void>();
    cuda::launch_wna16_decode_experts<T>(per_value, {}, nullptr);
    MG_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<T> out(tokens * c.hidden);
    d_out.download(out.data(), out_bytes);
    std::vector<double> pv(out.size());
    for (size_t i = 0; i < out.size(); ++i) pv[i] = to_f32(out[i]);
    const std::string why = compare_bounded(pv, rounded, 1.0 / 64, 1.0 / 64, 1e-2);
    msg += fmt::format(
        "; the per-value path (default tiles) gives {} there, and against the "
        "reference on the rounded weights it is {}",
        pv[bad], why.empty() ? "within bounds" : why);
  }
  return msg;
}

// One decode problem of check_decode: the case's random weights, activations and routing (from
// `seed`), the launch arguments without tiles, the grouped GEMM path's output and both fp64
// references; made once and checked for every tile variant (EveryTileVariantMatches), so the
// host-side references are not recomputed per variant.
template <typename T>
struct DecodeProblem {
  DecodeCase c;
  int64_t tokens = 0;
  std::vector<int32_t> ids, expert_map;
  std::vector<float> weights;
  PackedMatrix w13, w2;
  std::unique_ptr<DeviceBuffer> d_x, d_ids, d_w, d_map, d_b13, d_b2, d_act, d_out;
  cuda::Wna16DecodeArgs args;
  bool exact13 = false, exact2 = false, zero_token = false;
  std::vector<double> ref, rounded, gemm;
};

template <typename T>
std::unique_ptr<DecodeProblem<T>> make_decode_problem(const DecodeCase& c, int64_t tokens,
                                                      uint32_t seed) {
  auto problem = std::make_unique<DecodeProblem<T>>();
  DecodeProblem<T>& P = *problem;
  P.c = c;
  P.tokens = tokens;
  std::mt19937 rng(seed);
  MoEActParams act;
  act.kind = c.act;
  if (c.act == MoEActKind::kSwigluOai) {
    act.swiglu_alpha = 1.702f;
    act.swiglu_limit = 7.0f;
  }
  const bool gated = cuda::is_gated(c.act);
  const int64_t n1 = gated ? 2 * c.inter : c.inter;
  // c.experts local experts out of c.experts + 2 global ones; global ids 1 and 4 are not local.
  const int64_t global = c.experts + 2;
  std::vector<int32_t>& expert_map = P.expert_map;
  expert_map.resize(global);
  for (int64_t g = 0, local = 0; g < global; ++g) {
    expert_map[g] = (g == 1 || g == 4) ? -1 : static_cast<int32_t>(local++);
  }
  P.w13 = make_matrix<T>(c.kind, c.experts, n1, c.hidden, c.group, c.symmetric, gated ? 2 : 1, rng,
                         c.real_zeros);
  P.w2 = make_matrix<T>(c.kind, c.experts, c.hidden, c.inter, c.group, c.symmetric, 1, rng,
                        c.real_zeros);
  std::uniform_real_distribution<float> bias_value(-0.5f, 0.5f);
  std::vector<float> b13(c.experts * n1), b2(c.experts * c.hidden);
  for (float& b : b13) b = bias_value(rng);
  for (float& b : b2) b = bias_value(rng);
  std::uniform_real_distribution<float> xv(-1.0f, 1.0f);
  std::vector<float> x(tokens * c.hidden);
  for (float& v : x) v = round_to<T>(xv(rng));
  // Each token's top_k distinct global experts (as routing makes them); the last token of
  // several, with top_k 2, routes only to the experts of other ranks: its output must be zero.
  const int64_t pairs = tokens * c.top_k;
  std::vector<int32_t>& ids = P.ids;
  std::vector<float>& weights = P.weights;
  ids.resize(pairs);
  weights.resize(pairs);
  std::uniform_real_distribution<float> weight(0.1f, 1.0f);
  for (int64_t t = 0; t < tokens; ++t) {
    std::vector<int32_t> perm(global);
    for (int64_t g = 0; g < global; ++g) perm[g] = static_cast<int32_t>(g);
    std::shuffle(perm.begin(), perm.end(), rng);
    for (int64_t j = 0; j < c.top_k; ++j) {
      ids[t * c.top_k + j] = perm[j];
      weights[t * c.top_k + j] = weight(rng);
    }
  }
  P.zero_token = tokens > 1 && c.top_k == 2;
  const bool zero_token = P.zero_token;
  if (zero_token) {
    ids[(tokens - 1) * 2] = 1;
    ids[(tokens - 1) * 2 + 1] = 4;
  }

  std::vector<T> x_t(x.size());
  for (size_t i = 0; i < x.size(); ++i) x_t[i] = from_f32<T>(x[i]);
  P.d_x = device_copy(x_t);
  P.d_ids = device_copy(ids);
  P.d_w = device_copy(weights);
  P.d_map = device_copy(expert_map);
  P.d_b13 = device_copy(b13);
  P.d_b2 = device_copy(b2);
  P.d_act = std::make_unique<DeviceBuffer>(
      cuda::wna16_decode_scratch_bytes(tokens, c.top_k, c.inter, sizeof(T)));
  const size_t out_bytes = tokens * c.hidden * sizeof(T);
  P.d_out = std::make_unique<DeviceBuffer>(out_bytes);
  DeviceBuffer d_out_gemm(out_bytes);
  const PackedMatrix& w13 = P.w13;
  const PackedMatrix& w2 = P.w2;
  const std::unique_ptr<DeviceBuffer>& d_x = P.d_x;
  const std::unique_ptr<DeviceBuffer>& d_ids = P.d_ids;
  const std::unique_ptr<DeviceBuffer>& d_w = P.d_w;
  const std::unique_ptr<DeviceBuffer>& d_map = P.d_map;
  const std::unique_ptr<DeviceBuffer>& d_b13 = P.d_b13;
  const std::unique_ptr<DeviceBuffer>& d_b2 = P.d_b2;

  cuda::Wna16DecodeArgs& args = P.args;
  args.x = d_x->as<void>();
  args.topk_ids = d_ids->as<int32_t>();
  args.topk_weights = d_w->as<float>();
  args.expert_map = d_map->as<int32_t>();
  // MG_WNA16_FORCE_PER_VALUE=1: the decode kernels take the per-value dequantization for every
  // matrix (as for non-integer zero points), e.g. to tell the two paths apart on a failure.
  const bool force_per_value = force_per_value_from_env();
  args.w13 = w13.view;
  args.b13 = c.bias ? d_b13->as<float>() : nullptr;
  args.w2 = w2.view;
  if (force_per_value) {
    args.w13.zeros = cuda::Wna16Zeros::kReal;
    args.w2.zeros = cuda::Wna16Zeros::kReal;
  }
  P.exact13 = decode_uses_exact_codes(args.w13);
  P.exact2 = decode_uses_exact_codes(args.w2);
  const bool exact13 = P.exact13, exact2 = P.exact2;
  args.b2 = c.bias ? d_b2->as<float>() : nullptr;
  DeviceBuffer& d_act = *P.d_act;
  DeviceBuffer& d_out = *P.d_out;
  args.act_scratch = d_act.as<void>();
  args.out = d_out.as<void>();
  args.num_tokens = tokens;
  args.top_k = c.top_k;
  args.hidden = c.hidden;
  args.inter = c.inter;
  args.act = act;

  // The existing path on the same weights: align -> GEMM1 + act -> GEMM2 -> combine.
  DeviceBuffer d_counts(c.experts * 4), d_offsets((c.experts + 1) * 4), d_p2r(pairs * 4),
      d_r2p(pairs * 4), d_h(cuda::wna16_expert_mlp_scratch_bytes(pairs, c.inter, sizeof(T))),
      d_y(pairs * c.hidden * sizeof(T));
  cuda::MoEAlignment align;
  align.expert_counts = d_counts.as<int32_t>();
  align.expert_offsets = d_offsets.as<int32_t>();
  align.pair_to_row = d_p2r.as<int32_t>();
  align.row_to_pair = d_r2p.as<int32_t>();
  cuda::Wna16ExpertMlpArgs mlp;
  mlp.x = d_x->as<void>();
  mlp.row_to_pair = align.row_to_pair;
  mlp.top_k = c.top_k;
  mlp.expert_offsets = align.expert_offsets;
  mlp.num_experts = c.experts;
  mlp.max_rows = pairs;
  mlp.hidden = c.hidden;
  mlp.inter = c.inter;
  mlp.w13 = w13.view;
  mlp.b13 = args.b13;
  mlp.w2 = w2.view;
  mlp.b2 = args.b2;
  mlp.act = act;
  mlp.h = d_h.as<void>();
  mlp.out = d_y.as<void>();
  cuda::launch_moe_align(d_ids->as<int32_t>(), pairs, d_map->as<int32_t>(), global, c.experts,
                         align, nullptr);
  cuda::launch_wna16_expert_mlp<T>(mlp, cuda::Wna16GemmKernel::kMma16, nullptr);
  cuda::launch_moe_combine<T>(d_y.as<void>(), align, d_ids->as<int32_t>(), d_w->as<float>(),
                              d_map->as<int32_t>(), nullptr, tokens, c.top_k, c.hidden,
                              d_out_gemm.as<void>(), nullptr);
  MG_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<T> out_gemm(tokens * c.hidden);
  d_out_gemm.download(out_gemm.data(), out_bytes);

  // The fp64 reference on the given weights of W13 and W2: the intermediate rounded to T (as both
  // paths store it), the weighted top-k sum in fp64.
  std::vector<float> h(c.inter);
  const auto reference = [&](const std::vector<float>& r13, const std::vector<float>& r2) {
    std::vector<double> out_ref;
    out_ref.reserve(tokens * c.hidden);
    for (int64_t t = 0; t < tokens; ++t) {
      std::vector<double> sum(c.hidden, 0.0);
      const float* xr = x.data() + t * c.hidden;
      for (int64_t j = 0; j < c.top_k; ++j) {
        const int32_t e = expert_map[ids[t * c.top_k + j]];
        if (e < 0) continue;
        for (int64_t i = 0; i < c.inter; ++i) {
          double g = dot(xr, r13.data() + (e * n1 + i) * c.hidden, c.hidden);
          double u =
              gated ? dot(xr, r13.data() + (e * n1 + c.inter + i) * c.hidden, c.hidden) : 0.0;
          if (c.bias) {
            g += b13[e * n1 + i];
            if (gated) u += b13[e * n1 + c.inter + i];
          }
          h[i] = round_to<T>(reference_activation(act, g, u));
        }
        for (int64_t col = 0; col < c.hidden; ++col) {
          double y = dot(h.data(), r2.data() + (e * c.hidden + col) * c.inter, c.inter);
          if (c.bias) y += b2[e * c.hidden + col];
          sum[col] += weights[t * c.top_k + j] * y;
        }
      }
      out_ref.insert(out_ref.end(), sum.begin(), sum.end());
    }
    return out_ref;
  };
  // `rounded`: the weights rounded to T (the per-value path and the grouped GEMM); `ref`: the
  // weights the decode kernels use, per matrix (exact for integer zero points, PackedMatrix).
  P.rounded = reference(w13.ref, w2.ref);
  P.ref = exact13 || exact2 ? reference(exact13 ? w13.exact : w13.ref, exact2 ? w2.exact : w2.ref)
                            : P.rounded;
  for (int64_t i = 0; i < tokens * c.hidden; ++i) P.gemm.push_back(to_f32(out_gemm[i]));
  return problem;
}

// Runs `problem`'s launch with the variant's tiles (eagerly and as a CUDA graph: the same bytes)
// and checks it against the reference on the weights it uses and against the grouped GEMM path.
template <typename T>
void check_decode_variant(const DecodeProblem<T>& P, const TileVariant& variant) {
  const DecodeCase& c = P.c;
  const int64_t tokens = P.tokens;
  SCOPED_TRACE(fmt::format("{} M {} {} tiles {}", std::is_same_v<T, __half> ? "F16" : "BF16",
                           tokens, c.describe(), variant.name));
  const size_t out_bytes = tokens * c.hidden * sizeof(T);
  const std::vector<uint8_t> bytes = run_eager_and_graph(
      [&](cudaStream_t s) { cuda::launch_wna16_decode_experts<T>(P.args, variant.tiles, s); },
      *P.d_out, out_bytes);
  std::vector<T> out(tokens * c.hidden);
  std::memcpy(out.data(), bytes.data(), out_bytes);
  const std::vector<double>& ref = P.ref;
  const std::vector<double>& rounded = P.rounded;
  const std::vector<double>& gemm = P.gemm;
  const bool exact13 = P.exact13, exact2 = P.exact2, zero_token = P.zero_token;
  std::vector<double> got;
  for (int64_t i = 0; i < tokens * c.hidden; ++i) got.push_back(to_f32(out[i]));
  if (zero_token) {
    for (int64_t col = 0; col < c.hidden; ++col) {
      ASSERT_EQ(got[(tokens - 1) * c.hidden + col], 0.0) << "a token without local experts";
    }
  }
  // The intermediate is rounded to T by both; one ulp apart across a rounding boundary is
  // possible, so the bounds are those of the existing MLP test.
  constexpr double kRel = 1.0 / 64, kAbs = 1.0 / 64, kL2 = 1e-2;
  std::string why = compare_bounded(got, ref, kRel, kAbs, kL2);
  EXPECT_TRUE(why.empty()) << "decode vs reference ("
                           << (exact13 || exact2 ? "exact weights" : "weights rounded to T")
                           << "): " << why << "\n"
                           << (why.empty() ? std::string()
                                           : explain_decode_failure<T>(c, tokens, P.args, P.ids,
                                                                       P.expert_map, got, ref,
                                                                       rounded, gemm));
  // The grouped GEMM's per-value path rounds every weight to T: it may differ from the decode
  // path by what that rounding moves the reference (zero where the decode path rounds the same
  // way; the GEMM's exact and placed paths round no weight, the bound only widens there).
  std::vector<double> weight_rounding(ref.size());
  for (size_t i = 0; i < ref.size(); ++i) weight_rounding[i] = std::fabs(ref[i] - rounded[i]);
  why = compare_bounded(got, gemm, kRel, kAbs, kL2, &weight_rounding);
  EXPECT_TRUE(why.empty()) << "decode vs the grouped GEMM path: " << why;
}

template <typename T>
void check_decode(const DecodeCase& c, int64_t tokens, uint32_t seed) {
  check_decode_variant<T>(*make_decode_problem<T>(c, tokens, seed), TileVariant{"default", {}});
}

std::vector<DecodeCase> decode_cases() {
  std::vector<DecodeCase> cases;
  const auto add = [&](Kind kind, int64_t group, bool symmetric, int64_t E, int64_t top_k,
                       int64_t H, int64_t I, MoEActKind act, bool bias, bool real_zeros = false) {
    DecodeCase c;
    c.real_zeros = real_zeros;
    c.kind = kind;
    c.group = group;
    c.symmetric = symmetric;
    c.experts = E;
    c.top_k = top_k;
    c.hidden = H;
    c.inter = I;
    c.act = act;
    c.bias = bias;
    cases.push_back(c);
  };
  // INT4 / INT8: K must be a multiple of the group (I 160 = 5 x 32; channel-wise H 328, 72).
  add(Kind::kInt4, 128, true, 8, 4, 384, 256, MoEActKind::kSiluGated, false);
  add(Kind::kInt4, 32, false, 8, 2, 384, 160, MoEActKind::kGelu, true);
  add(Kind::kInt4, -1, false, 6, 2, 72, 136, MoEActKind::kReluSquared, false);
  add(Kind::kInt8, -1, false, 8, 2, 328, 136, MoEActKind::kSwigluOai, true);
  add(Kind::kInt8, 128, true, 8, 4, 256, 384, MoEActKind::kGeluTanhGated, false);
  add(Kind::kInt8, 32, false, 5, 2, 128, 160, MoEActKind::kSilu, true);
  // The shapes where the reverted cheap dequantization (db2fffc: 128 + q and a -(z + 128) Σx
  // correction per group, which cancelled) put single elements out of bounds on the H100: long
  // channel-wise groups (H 1024: 8 steps in one group), H 2816 at 16 tokens, channel-wise
  // asymmetric H 72, groups of 32 with biases, INT8 channel-wise asymmetric over 32 experts.
  add(Kind::kInt4, -1, true, 4, 2, 1024, 256, MoEActKind::kSiluGated, false);
  add(Kind::kInt4, 128, false, 4, 2, 2816, 128, MoEActKind::kSiluGated, true);
  add(Kind::kInt4, -1, false, 6, 2, 72, 136, MoEActKind::kReluSquared, false);
  add(Kind::kInt4, 32, false, 8, 2, 384, 160, MoEActKind::kGelu, true);
  add(Kind::kInt8, -1, false, 32, 2, 1024, 136, MoEActKind::kSilu, false);
  // Groups of 64 (two units; H 320 and I 192 end in a partial step) and 128 over several steps
  // with a slice starting mid-K (H 640).
  add(Kind::kInt4, 64, false, 8, 2, 320, 192, MoEActKind::kSiluGated, true);
  add(Kind::kInt8, 64, false, 6, 4, 320, 192, MoEActKind::kGelu, false);
  add(Kind::kInt4, 128, false, 16, 1, 640, 384, MoEActKind::kSwigluOai, true);
  // Groups of 256 (two K steps a group; the step-aligned group ends, IntPath::kExactSteps, with
  // slices starting mid-group).
  add(Kind::kInt4, 256, false, 8, 2, 768, 512, MoEActKind::kSiluGated, true);
  add(Kind::kInt8, 256, true, 6, 2, 512, 256, MoEActKind::kGelu, false);
  // Zero points that are not integers: the per-value path (Wna16Zeros::kReal).
  add(Kind::kInt4, 128, false, 8, 2, 384, 256, MoEActKind::kSiluGated, true, true);
  add(Kind::kInt8, -1, false, 6, 2, 328, 136, MoEActKind::kGelu, false, true);
  // FP4: a partial last scale group is fine (H 72, 328; I 136, 200, 2056).
  add(Kind::kMxfp4, 32, true, 8, 4, 72, 136, MoEActKind::kSwigluOai, true);
  add(Kind::kMxfp4, 32, true, 4, 2, 256, 2056, MoEActKind::kSiluGated, false);
  add(Kind::kNvfp4, 16, true, 8, 2, 328, 136, MoEActKind::kSiluGated, true);
  add(Kind::kNvfp4, 16, true, 6, 4, 256, 200, MoEActKind::kSilu, false);
  return cases;
}

TEST(CudaWna16Decode, MatchesReferenceAndGemmPath) {
  MG_REQUIRE_GPU();
  uint32_t seed = 7000;
  for (const DecodeCase& c : decode_cases()) {
    for (const int64_t tokens : {1, 2, 3, 5, 8, 16}) {
      check_decode<__nv_bfloat16>(c, tokens, ++seed);
      check_decode<__half>(c, tokens, ++seed);
    }
  }
}

// Every tile choice the timing test sweeps (the K split of both kernels, warps and blocks per CTA,
// expert slots) on every case and token count, BF16: the same checks as above, every variant on
// the same problem (its data and references made once).
TEST(CudaWna16Decode, EveryTileVariantMatches) {
  MG_REQUIRE_GPU();
  uint32_t seed = 9000;
  const std::vector<TileVariant> variants = tile_variants();
  for (const DecodeCase& c : decode_cases()) {
    for (const int64_t tokens : {1, 2, 3, 5, 8, 16}) {
      const auto problem = make_decode_problem<__nv_bfloat16>(c, tokens, ++seed);
      for (const TileVariant& v : variants) check_decode_variant(*problem, v);
    }
  }
}

// H 8192 at one token: the FP4 up kernel's staged x (32 KB) with the partial sums and the pair
// tables is more than the 48 KB a launch gets without opting in (launch_kernel opts in), every
// tile variant. One token only: from two tokens the grouped GEMM path this shape is also checked
// against may round an intermediate across a BF16 boundary the decode path does not (K 8192), and
// no staging happens there.
TEST(CudaWna16Decode, StagedXPastTheDefaultSharedMemoryLimit) {
  MG_REQUIRE_GPU();
  DecodeCase c;
  c.kind = Kind::kMxfp4;
  c.group = 32;
  c.symmetric = true;
  c.experts = 4;
  c.top_k = 2;
  c.hidden = 8192;
  c.inter = 64;
  c.act = MoEActKind::kSiluGated;
  c.bias = false;
  const auto problem = make_decode_problem<__nv_bfloat16>(c, 1, 9133);
  for (const TileVariant& v : tile_variants()) check_decode_variant(*problem, v);
}

// The packer's zero-point check (no GPU needed): integer codes in range with scales in
// [2^-100, 2^100] (or 0) take the exact path, anything else the per-value one.
TEST(CudaWna16Decode, ZeroKindOnHost) {
  using cuda::Wna16Zeros;
  const float scales[3] = {0.01f, 0.0f, -3.5f};
  const float int_zeros[3] = {0.0f, 7.0f, 15.0f};
  const uint8_t u8_zeros[3] = {0, 200, 255};
  EXPECT_EQ(cuda::wna16_zero_kind(scales, nullptr, nullptr, 3, 4), Wna16Zeros::kIntegerCodes);
  EXPECT_EQ(cuda::wna16_zero_kind(scales, int_zeros, nullptr, 3, 4), Wna16Zeros::kIntegerCodes);
  EXPECT_EQ(cuda::wna16_zero_kind(scales, nullptr, u8_zeros, 3, 8), Wna16Zeros::kIntegerCodes);
  EXPECT_EQ(cuda::wna16_zero_kind(scales, nullptr, u8_zeros, 3, 4), Wna16Zeros::kReal);  // > 15
  const float half_zeros[3] = {0.0f, 7.5f, 15.0f};
  EXPECT_EQ(cuda::wna16_zero_kind(scales, half_zeros, nullptr, 3, 4), Wna16Zeros::kReal);
  const float negative_zeros[3] = {0.0f, -1.0f, 15.0f};
  EXPECT_EQ(cuda::wna16_zero_kind(scales, negative_zeros, nullptr, 3, 4), Wna16Zeros::kReal);
  const float tiny_scales[3] = {0.01f, 1e-35f, 1.0f};
  EXPECT_EQ(cuda::wna16_zero_kind(tiny_scales, nullptr, nullptr, 3, 4), Wna16Zeros::kReal);
  const float nan_scales[3] = {0.01f, std::nanf(""), 1.0f};
  EXPECT_EQ(cuda::wna16_zero_kind(nan_scales, nullptr, nullptr, 3, 4), Wna16Zeros::kReal);
}

TEST(CudaWna16Decode, RefusesWhatItCannotTake) {
  MG_REQUIRE_GPU();
  std::mt19937 rng(1);
  const PackedMatrix w13 = make_matrix<__nv_bfloat16>(Kind::kInt4, 2, 256, 128, 128, true, 2, rng);
  const PackedMatrix w2 = make_matrix<__nv_bfloat16>(Kind::kInt4, 2, 128, 128, 128, true, 1, rng);
  DeviceBuffer scratch(1 << 16);
  cuda::Wna16DecodeArgs a;
  a.x = a.act_scratch = a.out = scratch.as<void>();
  a.topk_ids = scratch.as<int32_t>();
  a.topk_weights = scratch.as<float>();
  a.expert_map = scratch.as<int32_t>();
  a.w13 = w13.view;
  a.w2 = w2.view;
  a.top_k = 2;
  a.hidden = 128;
  a.inter = 128;
  a.num_tokens = cuda::kWna16DecodeMaxTokens + 1;
  EXPECT_THROW(cuda::launch_wna16_decode_experts<__nv_bfloat16>(a, {}, nullptr), Error);
  a.num_tokens = 1;
  a.act.kind = MoEActKind::kGelu;  // plain, but w13 is packed in two parts
  EXPECT_THROW(cuda::launch_wna16_decode_experts<__nv_bfloat16>(a, {}, nullptr), Error);
  a.act.kind = MoEActKind::kSiluGated;
  a.hidden = 256;  // w13's K steps do not fit
  EXPECT_THROW(cuda::launch_wna16_decode_experts<__nv_bfloat16>(a, {}, nullptr), Error);
  a.hidden = 128;
  // More {s, -z·s} floats an expert than the kernels' 32-bit offsets reach (refused before any
  // weight is read): 2 x 2^16 rows of 2^14 groups.
  const cuda::Wna16Weights w13_view = a.w13;
  a.w13.part_rows = int64_t{1} << 16;
  a.w13.groups = int64_t{1} << 14;
  try {
    cuda::launch_wna16_decode_experts<__nv_bfloat16>(a, {}, nullptr);
    ADD_FAILURE() << "2^32 pair floats an expert were taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("more pairs an expert than"), std::string::npos)
        << e.what();
  }
  a.w13 = w13_view;
  cuda::Wna16DecodeTiles tiles;
  tiles.up_k_slices = 1;
  tiles.up_blocks_per_cta = 17;  // 17 warps
  EXPECT_THROW(cuda::launch_wna16_decode_experts<__nv_bfloat16>(a, tiles, nullptr), Error);
  tiles = {};
  tiles.down_warps = 17;
  EXPECT_THROW(cuda::launch_wna16_decode_experts<__nv_bfloat16>(a, tiles, nullptr), Error);
  tiles = {};
  tiles.down_k_slices = -1;
  EXPECT_THROW(cuda::launch_wna16_decode_experts<__nv_bfloat16>(a, tiles, nullptr), Error);
  tiles = {};
  tiles.swap_operands = 2;
  EXPECT_THROW(cuda::launch_wna16_decode_experts<__nv_bfloat16>(a, tiles, nullptr), Error);
  tiles = {};
  tiles.up_expert_slots = -1;
  EXPECT_THROW(cuda::launch_wna16_decode_experts<__nv_bfloat16>(a, tiles, nullptr), Error);
}

// ---- 2. Timing (MG_WNA16_TIMING=1; prints, asserts nothing) ---------------------------------

// A random packed matrix made on the GPU: uniform words; integer pairs from
// launch_wna16_random_fill; MXFP4 scale bytes all 120 (2^-7).
struct RandomMatrix {
  std::unique_ptr<DeviceBuffer> words, params, scale_bytes;
  cuda::Wna16Weights view;
  double bytes_per_expert = 0.0;
};

RandomMatrix random_matrix(Kind kind, int64_t E, int64_t rows, int64_t cols, int64_t group,
                           int64_t parts, uint64_t seed) {
  const bool fp4 = kind == Kind::kMxfp4;
  const cuda::Wna16PackedHost p =
      fp4 ? cuda::wna16_layout_e2m1(Wna16Codes::kMxfp4, E, rows, cols, parts)
          : cuda::wna16_layout(E, rows, cols, kind == Kind::kInt4 ? 4 : 8, group, parts);
  RandomMatrix m;
  m.words = std::make_unique<DeviceBuffer>(p.word_count() * 4);
  m.params = std::make_unique<DeviceBuffer>(std::max<int64_t>(p.param_count() * 4, 16));
  m.scale_bytes = std::make_unique<DeviceBuffer>(std::max<int64_t>(p.scale_byte_count(), 16));
  cuda::launch_wna16_random_fill(m.words->as<uint32_t>(), p.word_count(), m.params->as<float>(),
                                 p.param_count(), p.bits, 0.01f, seed, nullptr);
  if (fp4) MG_CUDA_CHECK(cudaMemset(m.scale_bytes->as<void>(), 120, p.scale_byte_count()));
  MG_CUDA_CHECK(cudaDeviceSynchronize());
  m.view =
      cuda::wna16_weights_view(p, m.words->as<uint32_t>(), fp4 ? nullptr : m.params->as<float>(),
                               fp4 ? m.scale_bytes->as<uint8_t>() : nullptr);
  // launch_wna16_random_fill draws integer zero points (as make_random_wna16_weights marks them).
  if (!fp4) m.view.zeros = cuda::Wna16Zeros::kIntegerCodes;
  m.bytes_per_expert = p.bytes_per_expert();
  return m;
}

// The decode path (up + down) against the current path (align -> GEMM1 + act -> GEMM2 ->
// combine, the GEMM tile the backend picks) with the same routed ids (routing excluded from
// both), and the floor: the packed bytes of the touched experts over the device's measured copy
// bandwidth (a 2 GiB device-to-device copy, as `bench moe` measures it). Each graph replays
// kRouteSets launches over different routed ids, as consecutive layers of a model would: the
// experts one set touches are not in L2 when the next set runs (one token of qwen3-30b-a3b INT4
// touches 19 MB of experts, which one route replayed alone would find in L2). Run with
//   MG_WNA16_TIMING=1 build/tests/mg_cuda_tests --gtest_filter='CudaWna16Decode.Timing*'
constexpr int kRouteSets = 8;

TEST(CudaWna16Decode, TimingQwen3AndGptOss) {
  MG_REQUIRE_GPU();
  if (std::getenv("MG_WNA16_TIMING") == nullptr) GTEST_SKIP() << "set MG_WNA16_TIMING=1 to time";
  using T = __nv_bfloat16;
  const double bytes_per_us = measure_copy_bandwidth(Device::cuda(0)) / 1.0e6;
  std::cout << fmt::format("copy bandwidth {:.0f} GB/s; {} route sets a replay\n",
                           bytes_per_us / 1.0e3, kRouteSets);
  struct Shape {
    const char* name;
    Kind kind;
    int64_t group, E, H, I, top_k;
    MoEActKind act;
  };
  for (const Shape& sh :
       {Shape{"qwen3-30b-a3b", Kind::kInt4, 128, 128, 2048, 768, 8, MoEActKind::kSiluGated},
        Shape{"qwen3-30b-a3b", Kind::kInt8, 128, 128, 2048, 768, 8, MoEActKind::kSiluGated},
        Shape{"gpt-oss-120b", Kind::kMxfp4, 32, 128, 2880, 2880, 4, MoEActKind::kSwigluOai}}) {
    const RandomMatrix w13 = random_matrix(sh.kind, sh.E, 2 * sh.I, sh.H, sh.group, 2, 11);
    const RandomMatrix w2 = random_matrix(sh.kind, sh.E, sh.H, sh.I, sh.group, 1, 12);
    std::mt19937 rng(5);
    for (const int64_t M : {1, 2, 4, 8, 16}) {
      const int64_t pairs = M * sh.top_k;
      std::vector<int32_t> map(sh.E);
      std::vector<float> weights(pairs, 1.0f / static_cast<float>(sh.top_k));
      for (int64_t e = 0; e < sh.E; ++e) map[e] = static_cast<int32_t>(e);
      // kRouteSets sets of routed ids; the floor counts each set's distinct experts.
      std::vector<std::unique_ptr<DeviceBuffer>> d_ids;
      int64_t distinct = 0;
      for (int set = 0; set < kRouteSets; ++set) {
        std::vector<int32_t> ids(pairs);
        std::vector<bool> touched(sh.E, false);
        for (int64_t t = 0; t < M; ++t) {
          std::vector<int32_t> perm(sh.E);
          for (int64_t e = 0; e < sh.E; ++e) perm[e] = static_cast<int32_t>(e);
          std::shuffle(perm.begin(), perm.end(), rng);
          for (int64_t j = 0; j < sh.top_k; ++j) {
            ids[t * sh.top_k + j] = perm[j];
            touched[perm[j]] = true;
          }
        }
        distinct += std::count(touched.begin(), touched.end(), true);
        d_ids.push_back(device_copy(ids));
      }
      std::vector<T> x(M * sh.H);
      std::uniform_real_distribution<float> xv(-1.0f, 1.0f);
      for (T& v : x) v = from_f32<T>(xv(rng));
      const std::unique_ptr<DeviceBuffer> d_x = device_copy(x);
      auto d_w = device_copy(weights);
      auto d_map = device_copy(map);
      DeviceBuffer d_counts(sh.E * 4), d_offsets((sh.E + 1) * 4), d_p2r(pairs * 4),
          d_r2p(pairs * 4), d_h(cuda::wna16_expert_mlp_scratch_bytes(pairs, sh.I, sizeof(T))),
          d_y(pairs * sh.H * sizeof(T)), d_out(M * sh.H * sizeof(T));
      MoEActParams act;
      act.kind = sh.act;
      if (sh.act == MoEActKind::kSwigluOai) {
        act.swiglu_alpha = 1.702f;
        act.swiglu_limit = 7.0f;
      }

      cuda::MoEAlignment align;
      align.expert_counts = d_counts.as<int32_t>();
      align.expert_offsets = d_offsets.as<int32_t>();
      align.pair_to_row = d_p2r.as<int32_t>();
      align.row_to_pair = d_r2p.as<int32_t>();
      cuda::Wna16ExpertMlpArgs mlp;
      mlp.x = d_x->as<void>();
      mlp.row_to_pair = align.row_to_pair;
      mlp.top_k = sh.top_k;
      mlp.expert_offsets = align.expert_offsets;
      mlp.num_experts = sh.E;
      mlp.max_rows = pairs;
      mlp.hidden = sh.H;
      mlp.inter = sh.I;
      mlp.w13 = w13.view;
      mlp.w2 = w2.view;
      mlp.act = act;
      mlp.h = d_h.as<void>();
      mlp.out = d_y.as<void>();
      const cuda::Wna16GemmKernel kernel =
          cuda::choose_wna16_gemm_kernel(pairs, sh.E, w13.view.codes);
      const double gemm_us =
          testing::graph_replay_us(
              [&](cudaStream_t s) {
                for (const auto& ids : d_ids) {
                  cuda::launch_moe_align(ids->as<int32_t>(), pairs, d_map->as<int32_t>(), sh.E,
                                         sh.E, align, s);
                  cuda::launch_wna16_expert_mlp<T>(mlp, kernel, s);
                  cuda::launch_moe_combine<T>(d_y.as<void>(), align, ids->as<int32_t>(),
                                              d_w->as<float>(), d_map->as<int32_t>(), nullptr, M,
                                              sh.top_k, sh.H, d_out.as<void>(), s);
                }
              },
              50, 5) /
          kRouteSets;

      cuda::Wna16DecodeArgs a;
      a.x = d_x->as<void>();
      a.topk_weights = d_w->as<float>();
      a.expert_map = d_map->as<int32_t>();
      a.w13 = w13.view;
      a.w2 = w2.view;
      a.act_scratch = d_h.as<void>();
      a.out = d_out.as<void>();
      a.num_tokens = M;
      a.top_k = sh.top_k;
      a.hidden = sh.H;
      a.inter = sh.I;
      a.act = act;
      const auto decode_us = [&](const cuda::Wna16DecodeArgs& args,
                                 const cuda::Wna16DecodeTiles& tiles) {
        return testing::graph_replay_us(
                   [&](cudaStream_t s) {
                     for (const auto& ids : d_ids) {
                       cuda::Wna16DecodeArgs one = args;
                       one.topk_ids = ids->as<int32_t>();
                       cuda::launch_wna16_decode_experts<T>(one, tiles, s);
                     }
                   },
                   50, 5) /
               kRouteSets;
      };
      const double floor_us = static_cast<double>(distinct) / kRouteSets *
                              (w13.bytes_per_expert + w2.bytes_per_expert) / bytes_per_us;
      std::cout << fmt::format(
          "{} {} M {:>2} experts {:>5.1f}: floor {:6.1f} us | grouped GEMM ({}) {:7.1f} us "
          "({:3.0f}%)\n",
          sh.name, kind_label(sh.kind), M, static_cast<double>(distinct) / kRouteSets, floor_us,
          cuda::wna16_gemm_kernel_name(kernel), gemm_us, 100.0 * floor_us / gemm_us);
      // The default tiles, then the variants for tuning (each checked by EveryTileVariantMatches).
      const std::vector<TileVariant> variants = tile_variants();
      for (const TileVariant& v : variants) {
        const double us = decode_us(a, v.tiles);
        std::cout << fmt::format(
            "    {:<24} {:7.1f} us ({:3.0f}% of the floor, {:4.2f}x the GEMM)\n", v.name, us,
            100.0 * floor_us / us, gemm_us / us);
      }
      if (sh.kind == Kind::kInt4 || sh.kind == Kind::kInt8) {
        // The same weights through the per-value dequantization (what non-integer zero points
        // take), default tiles: the exact path's gain.
        cuda::Wna16DecodeArgs per_value = a;
        per_value.w13.zeros = cuda::Wna16Zeros::kReal;
        per_value.w2.zeros = cuda::Wna16Zeros::kReal;
        const double us = decode_us(per_value, variants.front().tiles);
        std::cout << fmt::format(
            "    {:<24} {:7.1f} us ({:3.0f}% of the floor, {:4.2f}x the GEMM)\n",
            "default, per-value dq", us, 100.0 * floor_us / us, gemm_us / us);
      }
    }
  }
}

#endif  // MG_WITH_CUDA

}  // namespace
}  // namespace mg
