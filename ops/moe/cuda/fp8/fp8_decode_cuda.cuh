// The FP8 decode experts (launch_fp8_decode_experts, fp8_experts_cuda.h): the routed expert MLPs of
// a few tokens as weight-streaming GEMVs over the e4m3 weights, with no permutation step. nvcc
// only; included by fp8_decode_cuda_<dtype>.cu.
//
// The shape is the one of the BF16 decode kernels (ops/moe/cuda/decode_experts_cuda.cuh, whose
// pair grouping, weight loads and tile sizes this reuses): each CTA groups the M*k pairs by local
// expert, a warp streams a few weight rows in 16-byte vectors (16 codes, never cached in L1) and
// dots each with the quantised rows of every pair of that expert, so a weight is read once however
// many tokens share it. Launches:
//   quantise x     xq, xs = quant(x) per 128 group (launch_fp8_quantize)
//   up             h[p, i] = act(Σ_kb ... (W13 gate row i) + b, Σ_kb ... (up row I + i) + b') in T
//   quantise h     hq, hs = quant(h)
//   down           out[t, :] = Σ_j w[t, j] (Σ_kb ... (W2 rows) + b2), fp32, one rounding to T
// Σ_kb is the GEMM path's block-scaled sum: codes are dotted in fp32 and each 16-code partial is
// scaled by xs[kb] * S[row / block_n][kb * 128 / block_k] of its 128 block (the same products,
// summed in another order).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <climits>
#include <cstdint>

#include "framework/core/error.h"
#include "framework/device/cuda/cuda_check.h"
#include "framework/device/cuda/cuda_utils.cuh"
#include "ops/moe/cuda/decode_experts_cuda.cuh"
#include "ops/moe/cuda/fp8/fp8_experts_cuda.h"
#include "ops/moe/cuda/moe_activation_cuda.cuh"

namespace mg::cuda::fp8 {

// The 16 e4m3 codes of a 16-byte vector as floats (exact: e4m3 values are halves).
__device__ __forceinline__ void e4m3x16_to_float(const uint4& v, float (&f)[16]) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const auto pair = static_cast<__nv_fp8x2_storage_t>((w[i] >> (16 * h)) & 0xffffu);
      const __half2 halves(__nv_cvt_fp8x2_to_halfraw2(pair, __NV_E4M3));  // low byte -> .x
      const float2 two = __half22float2(halves);
      f[4 * i + 2 * h] = two.x;
      f[4 * i + 2 * h + 1] = two.y;
    }
  }
}

// Weight scale addressing of one expert: the scale of row `row`, 128 group `grp` is
// s[(row / block_n) * cols + grp / groups_per_block]; groups_per_block = block_k / 128, or INT_MAX
// when one block covers all of K (block_k not a multiple of 128), which maps every group to 0.
struct ScaleLayout {
  int block_n = 1;
  int cols = 1;
  int groups_per_block = 1;
};

inline ScaleLayout scale_layout(const Fp8WeightScales& s, int64_t k) {
  ScaleLayout l;
  l.block_n = static_cast<int>(s.block_n);
  l.cols = static_cast<int>((k + s.block_k - 1) / s.block_k);
  l.groups_per_block =
      s.block_k % kFp8Group == 0 ? static_cast<int>(s.block_k / kFp8Group) : INT_MAX;
  return l;
}

// acc[r][n] += this lane's share of Σ over the 16-code vectors c of
//   (wrow[r][c] · x[xrow[n]][c]) * xs[xrow[n]][c / 8] * wscale[r][(c / 8) / groups_per_block]
// over `len` codes (x [rows, len] codes, xs [rows, g(len)] scales), n < count. Lane l takes
// vectors l, l + 32, ...; V vectors of each of the R rows are loaded before the first is used.
// The caller reduces over the warp. (Row indices rather than pointers keep NT = 8 within the
// registers of two CTAs per SM.)
template <int R, int NT, int V>
__device__ __forceinline__ void fp8_warp_dot(float (&acc)[R][NT], const uint8_t* const (&wrow)[R],
                                             const float* const (&wscale)[R], int groups_per_block,
                                             const uint8_t* x, const float* xs,
                                             const int (&xrow)[NT], int count, int len,
                                             bool per_token) {
  // Scale columns of x: one per 128 group, or one per row (per token: column 0 for every group).
  const int x_cols = static_cast<int>(fp8_act_scale_cols(len, per_token));
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int chunks = len / 16;
  for (int c0 = lane; c0 < chunks; c0 += 32 * V) {
    uint4 w[R][V];
#pragma unroll
    for (int v = 0; v < V; ++v) {
      const int c = c0 + 32 * v;
#pragma unroll
      for (int r = 0; r < R; ++r) {
        w[r][v] = c < chunks ? decode::load_weights(wrow[r] + static_cast<int64_t>(c) * 16)
                             : make_uint4(0u, 0u, 0u, 0u);
      }
    }
#pragma unroll
    for (int v = 0; v < V; ++v) {
      const int c = c0 + 32 * v;
      if (c >= chunks) break;
      const int group = c >> 3;  // 8 vectors of 16 codes per 128 group
      const int wgroup = group / groups_per_block;
      float wf[R][16];
      float ws[R];
#pragma unroll
      for (int r = 0; r < R; ++r) {
        e4m3x16_to_float(w[r][v], wf[r]);
        ws[r] = __ldg(wscale[r] + wgroup);
      }
#pragma unroll
      for (int n = 0; n < NT; ++n) {
        if (n >= count) break;
        float xf[16];
        e4m3x16_to_float(
            *reinterpret_cast<const uint4*>(x + static_cast<int64_t>(xrow[n]) * len + c * 16), xf);
        const float x_scale = __ldg(xs + xrow[n] * x_cols + (x_cols == 1 ? 0 : group));
#pragma unroll
        for (int r = 0; r < R; ++r) {
          float dot = 0.0f;
#pragma unroll
          for (int i = 0; i < 16; ++i) dot = fmaf(wf[r][i], xf[i], dot);
          acc[r][n] = fmaf(dot, x_scale * ws[r], acc[r][n]);
        }
      }
    }
  }
}

// Vectors per weight row in flight: four (eight 16-byte loads per lane with two rows) where the
// registers allow, two at NT = 8.
template <int NT>
inline constexpr int kDotVectors = NT >= 8 ? 2 : 4;

struct UpParams {
  const uint8_t* xq = nullptr;  // [tokens, hidden]
  const float* xs = nullptr;    // [tokens, g(hidden)]
  const int32_t* topk_ids = nullptr;
  decode::LocalExperts experts{};
  const uint8_t* w13 = nullptr;
  const float* s13 = nullptr;
  ScaleLayout s13_layout;
  int s13_rows = 0;  // scale rows per expert
  const float* b13 = nullptr;
  void* h = nullptr;  // [num_pairs, inter] T
  int num_pairs = 0, top_k = 0, hidden = 0, inter = 0;
  int units_per_cta = 0;   // h columns per CTA
  bool per_token = false;  // activation scales per token (else per 128 group)
  MoEActParams act;
};

// h[p, unit] for the pairs p = t*k + j of each expert. A warp item is one gated unit (gate and up
// row) or two plain units: two weight rows of four vectors, eight loads per lane in flight.
template <typename T, int NT, bool kGated>
__global__ void __launch_bounds__(decode::kThreads, 2) fp8_decode_up_kernel(const UpParams p) {
  constexpr int R = 2;
  constexpr int UW = kGated ? 1 : 2;  // units per warp item
  static_assert(UW * NT <= 32, "one lane stores each (unit, pair) result");
  __shared__ decode::PairGroups g;
  decode::group_pairs(g, p.topk_ids, p.experts, p.num_pairs);

  T* h = static_cast<T*>(p.h);
  const int warp = static_cast<int>(threadIdx.x / 32);
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int64_t hidden = p.hidden;
  const int64_t n1 = kGated ? 2 * static_cast<int64_t>(p.inter) : p.inter;
  const ScaleLayout sl = p.s13_layout;
  const int unit_begin = static_cast<int>(blockIdx.x) * p.units_per_cta;
  const int unit_end = min(unit_begin + p.units_per_cta, p.inter);

  // Pairs whose expert is not on this rank get zero rows, so the quantisation of h that follows
  // never reads unwritten memory (the down kernel skips them).
  if (blockIdx.y == 0) {
    const int units = unit_end - unit_begin;
    for (int i = static_cast<int>(threadIdx.x); i < p.num_pairs * units; i += decode::kThreads) {
      const int pr = i / units;
      if (g.local[pr] < 0) {
        h[static_cast<int64_t>(pr) * p.inter + unit_begin + (i - pr * units)] = from_float<T>(0.0f);
      }
    }
  }

  for (int u = static_cast<int>(blockIdx.y); u < g.num_experts; u += static_cast<int>(gridDim.y)) {
    const int e = g.expert[u];
    const uint8_t* w_e = p.w13 + static_cast<int64_t>(e) * n1 * hidden;
    const float* s_e = p.s13 + static_cast<int64_t>(e) * p.s13_rows * sl.cols;
    const int group_end = g.offset[u + 1];
    for (int first = g.offset[u]; first < group_end; first += NT) {
      const int count = min(NT, group_end - first);
      int pair[NT], token[NT];
#pragma unroll
      for (int n = 0; n < NT; ++n) {
        pair[n] = g.pair[first + min(n, count - 1)];
        token[n] = pair[n] / p.top_k;
      }
      for (int unit0 = unit_begin + warp * UW; unit0 < unit_end; unit0 += decode::kWarps * UW) {
        const uint8_t* wrow[R];
        const float* wscale[R];
#pragma unroll
        for (int r = 0; r < R; ++r) {
          // Gated: gate row `unit`, up row I + unit. Plain: units unit0, unit0 + 1. Tail units
          // load a valid row.
          const int unit = min(unit0 + (kGated ? 0 : r), p.inter - 1);
          const int64_t row = kGated && r == 1 ? p.inter + unit : unit;
          wrow[r] = w_e + row * hidden;
          wscale[r] = s_e + (row / sl.block_n) * sl.cols;
        }
        float acc[R][NT] = {};
        fp8_warp_dot<R, NT, kDotVectors<NT>>(acc, wrow, wscale, sl.groups_per_block, p.xq, p.xs,
                                             token, count, p.hidden, p.per_token);
#pragma unroll
        for (int j = 0; j < UW; ++j) {
#pragma unroll
          for (int n = 0; n < NT; ++n) {
            if (n >= count) break;
            float gate = warp_sum(acc[j][n]);
            float up = kGated ? warp_sum(acc[1][n]) : 0.0f;
            const int unit = unit0 + j;
            if (lane == j * NT + n && unit < unit_end) {
              if (p.b13 != nullptr) {
                gate += p.b13[e * n1 + unit];
                if constexpr (kGated) up += p.b13[e * n1 + p.inter + unit];
              }
              h[static_cast<int64_t>(pair[n]) * p.inter + unit] =
                  from_float<T>(moe_activation(p.act, gate, up));
            }
          }
        }
      }
    }
  }
}

struct DownParams {
  const int32_t* topk_ids = nullptr;
  const float* topk_weights = nullptr;
  decode::LocalExperts experts{};
  const uint8_t* w2 = nullptr;
  const float* s2 = nullptr;
  ScaleLayout s2_layout;
  int s2_rows = 0;
  const float* b2 = nullptr;
  const uint8_t* hq = nullptr;  // [num_pairs, inter]
  const float* hs = nullptr;    // [num_pairs, g(inter)]
  void* out = nullptr;          // [num_tokens, hidden] T
  int num_pairs = 0, num_tokens = 0, top_k = 0, hidden = 0, inter = 0;
  int rows_per_cta = 0;
  bool per_token = false;  // activation scales per token (else per 128 group)
};

// out[t, h] for the CTA's rows h: the dot products of every (expert, pair group, row group) item
// land in shared memory, partial[p, h - row_begin], and each out[t, h] sums its pairs j in order
// (no atomics, one rounding).
template <typename T, int NT>
__global__ void __launch_bounds__(decode::kThreads, 2) fp8_decode_down_kernel(const DownParams p) {
  constexpr int R = 2;
  static_assert(R * NT <= 32, "one lane stores each (row, pair) result");
  __shared__ decode::PairGroups g;
  extern __shared__ float partial[];  // [num_pairs, rows_per_cta]
  decode::group_pairs(g, p.topk_ids, p.experts, p.num_pairs);

  T* out = static_cast<T*>(p.out);
  const int warp = static_cast<int>(threadIdx.x / 32);
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int64_t hidden = p.hidden;
  const ScaleLayout sl = p.s2_layout;
  const int row_begin = static_cast<int>(blockIdx.x) * p.rows_per_cta;
  const int rows = min(p.rows_per_cta, p.hidden - row_begin);
  const int row_groups = (rows + R - 1) / R;

  int item = 0;
  for (int u = 0; u < g.num_experts; ++u) {
    const int e = g.expert[u];
    const float* s_e = p.s2 + static_cast<int64_t>(e) * p.s2_rows * sl.cols;
    const int group_end = g.offset[u + 1];
    for (int first = g.offset[u]; first < group_end; first += NT) {
      for (int rg = 0; rg < row_groups; ++rg, ++item) {
        if (item % decode::kWarps != warp) continue;
        const int count = min(NT, group_end - first);
        int pair[NT];
#pragma unroll
        for (int n = 0; n < NT; ++n) pair[n] = g.pair[first + min(n, count - 1)];
        const uint8_t* wrow[R];
        const float* wscale[R];
#pragma unroll
        for (int r = 0; r < R; ++r) {
          const int64_t hrow = row_begin + min(rg * R + r, rows - 1);  // tails load a valid row
          wrow[r] = p.w2 + (static_cast<int64_t>(e) * hidden + hrow) * p.inter;
          wscale[r] = s_e + (hrow / sl.block_n) * sl.cols;
        }
        float acc[R][NT] = {};
        fp8_warp_dot<R, NT, kDotVectors<NT>>(acc, wrow, wscale, sl.groups_per_block, p.hq, p.hs,
                                             pair, count, p.inter, p.per_token);
#pragma unroll
        for (int r = 0; r < R; ++r) {
#pragma unroll
          for (int n = 0; n < NT; ++n) {
            if (n >= count) break;
            const float dot = warp_sum(acc[r][n]);
            if (lane == r * NT + n && rg * R + r < rows) {
              partial[pair[n] * p.rows_per_cta + rg * R + r] = dot;
            }
          }
        }
      }
    }
  }
  __syncthreads();

  for (int i = static_cast<int>(threadIdx.x); i < p.num_tokens * rows; i += decode::kThreads) {
    const int t = i / rows;
    const int r = i - t * rows;
    const int64_t hrow = row_begin + r;
    float sum = 0.0f;
    for (int j = 0; j < p.top_k; ++j) {
      const int pr = t * p.top_k + j;
      const int e = g.local[pr];
      if (e < 0) continue;
      float y = partial[pr * p.rows_per_cta + r];
      if (p.b2 != nullptr) y += p.b2[e * hidden + hrow];
      sum += p.topk_weights[pr] * y;
    }
    out[t * hidden + hrow] = from_float<T>(sum);
  }
}

template <typename T, int NT>
void launch_decode(const Fp8DecodeArgs& a, const Fp8DecodeScratchLayout& layout,
                   cudaStream_t stream) {
  char* scratch = static_cast<char*>(a.scratch);
  const bool gated = is_gated(a.act.kind);
  const int pairs = static_cast<int>(a.num_tokens * a.top_k);

  UpParams up;
  up.xq = reinterpret_cast<const uint8_t*>(scratch + layout.xq);
  up.xs = reinterpret_cast<const float*>(scratch + layout.xs);
  up.topk_ids = a.topk_ids;
  up.experts = {a.expert_map, a.identity_experts};
  up.w13 = a.w13;
  up.s13 = a.s13.scales;
  up.s13_layout = scale_layout(a.s13, a.hidden);
  const int64_t n1 = gated ? 2 * a.inter : a.inter;
  up.s13_rows = static_cast<int>((n1 + a.s13.block_n - 1) / a.s13.block_n);
  up.b13 = a.b13;
  up.h = scratch + layout.h;
  up.num_pairs = pairs;
  up.top_k = static_cast<int>(a.top_k);
  up.hidden = static_cast<int>(a.hidden);
  up.inter = static_cast<int>(a.inter);
  up.units_per_cta = decode::up_units_per_cta(decode::Tiles{}, a.inter, a.num_tokens, a.top_k);
  up.act = a.act;
  up.per_token = a.act_per_token;
  const dim3 up_grid((up.inter + up.units_per_cta - 1) / up.units_per_cta,
                     std::min(pairs, decode::Tiles{}.up_expert_slots));
  if (gated) {
    fp8_decode_up_kernel<T, NT, true><<<up_grid, decode::kThreads, 0, stream>>>(up);
  } else {
    fp8_decode_up_kernel<T, NT, false><<<up_grid, decode::kThreads, 0, stream>>>(up);
  }
  MG_CUDA_CHECK_LAUNCH();

  Fp8QuantArgs qh;
  qh.x = scratch + layout.h;
  qh.max_rows = pairs;
  qh.k = a.inter;
  qh.xq = reinterpret_cast<uint8_t*>(scratch + layout.hq);
  qh.xs = reinterpret_cast<float*>(scratch + layout.hs);
  qh.per_token = a.act_per_token;
  qh.static_scale = a.h_static_scale;
  launch_fp8_quantize<T>(qh, stream);

  DownParams down;
  down.topk_ids = a.topk_ids;
  down.topk_weights = a.topk_weights;
  down.experts = {a.expert_map, a.identity_experts};
  down.w2 = a.w2;
  down.s2 = a.s2.scales;
  down.s2_layout = scale_layout(a.s2, a.inter);
  down.s2_rows = static_cast<int>((a.hidden + a.s2.block_n - 1) / a.s2.block_n);
  down.b2 = a.b2;
  down.hq = qh.xq;
  down.hs = qh.xs;
  down.out = a.out;
  down.num_pairs = pairs;
  down.num_tokens = static_cast<int>(a.num_tokens);
  down.top_k = static_cast<int>(a.top_k);
  down.hidden = static_cast<int>(a.hidden);
  down.inter = static_cast<int>(a.inter);
  // Two CTAs per SM in one wave, with the partial sums kept within 32 KB of shared memory.
  int rows = decode::down_rows_per_cta(decode::Tiles{}, a.hidden, 2);
  const int max_rows = std::max(2, (32 * 1024 / (4 * pairs)) / 2 * 2);
  down.rows_per_cta = std::min(rows, max_rows);
  down.per_token = a.act_per_token;
  const dim3 down_grid((down.hidden + down.rows_per_cta - 1) / down.rows_per_cta);
  const size_t smem = static_cast<size_t>(pairs) * down.rows_per_cta * sizeof(float);
  fp8_decode_down_kernel<T, NT><<<down_grid, decode::kThreads, smem, stream>>>(down);
  MG_CUDA_CHECK_LAUNCH();
}

}  // namespace mg::cuda::fp8

namespace mg::cuda {

template <typename T>
void launch_fp8_decode_experts(const Fp8DecodeArgs& a, cudaStream_t stream) {
  const std::string why =
      fp8_decode_check(a.num_tokens, a.top_k, a.hidden, a.inter, is_gated(a.act.kind), a.s13, a.s2);
  MG_CHECK(why.empty(), "FP8 decode experts: {}", why);
  if (a.num_tokens <= 0) return;
  const Fp8DecodeScratchLayout layout =
      fp8_decode_scratch_layout(a.num_tokens, a.top_k, a.hidden, a.inter, sizeof(T));
  MG_CHECK(a.scratch != nullptr && a.scratch_bytes >= layout.total,
           "FP8 decode experts: scratch of {} bytes is smaller than the {} needed", a.scratch_bytes,
           layout.total);
  MG_CHECK(a.x != nullptr && a.topk_ids != nullptr && a.topk_weights != nullptr &&
               a.expert_map != nullptr && a.w13 != nullptr && a.s13.scales != nullptr &&
               a.w2 != nullptr && a.s2.scales != nullptr && a.out != nullptr,
           "FP8 decode experts: x, topk ids/weights, expert_map, weights, scales and out must be "
           "set");

  Fp8QuantArgs qx;
  qx.x = a.x;
  qx.max_rows = a.num_tokens;
  qx.k = a.hidden;
  qx.xq = reinterpret_cast<uint8_t*>(static_cast<char*>(a.scratch) + layout.xq);
  qx.xs = reinterpret_cast<float*>(static_cast<char*>(a.scratch) + layout.xs);
  qx.per_token = a.act_per_token;
  qx.static_scale = a.x_static_scale;
  launch_fp8_quantize<T>(qx, stream);

  // NT, the pairs a weight row is dotted with at once, follows the tokens: at M = 1 every expert
  // has one pair, and a larger NT only costs registers.
  if (a.num_tokens == 1) {
    fp8::launch_decode<T, 1>(a, layout, stream);
  } else if (a.num_tokens <= 4) {
    fp8::launch_decode<T, 4>(a, layout, stream);
  } else {
    fp8::launch_decode<T, 8>(a, layout, stream);
  }
}

}  // namespace mg::cuda
