// Kernels of decode_experts_cuda.h, included by decode_experts_cuda_<dtype>.cu (launch_tiled takes
// explicit tiles, for sweeping them). nvcc only.
//
// Decode is bound by weight bytes, not arithmetic: at M = 1 the up kernel reads k * 2I * H weights
// to produce k * I numbers. So both kernels are GEMVs in which a warp streams a few weight rows in
// 16-byte vectors (kept out of L1, which holds the vectors they multiply) and dots each row with
// the vectors of every pair that uses the expert, so a weight is read once however many tokens
// share it. The shape of the work:
//
//   group_pairs   every CTA groups the M*k pairs by local expert (u = 0..U-1, in order of first
//                 use) in shared memory: M*k <= 256 ids, cheaper than a permutation launch
//   up            grid (inter / units_per_cta, expert slots); a CTA takes units (act columns) of
//                 experts u = blockIdx.y, + gridDim.y, ...; x of up to NT pairs is staged in
//                 shared memory and each warp computes UW units (gate and up rows) for them
//   down          grid (hidden / rows_per_cta); a CTA owns whole output rows: its warps compute
//                 W2[e][h] . act[p] for every (expert, pair group, row group) into shared memory,
//                 then each out[t, h] is summed over j in order, so no atomics and one rounding
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "framework/core/error.h"
#include "framework/device/cuda/cuda_check.h"
#include "framework/device/cuda/cuda_utils.cuh"
#include "framework/device/cuda/pdl.cuh"
#include "ops/moe/cuda/decode_experts_cuda.h"
#include "ops/moe/cuda/moe_activation_cuda.cuh"

namespace mg::cuda::decode {

inline constexpr int kThreads = 256;
inline constexpr int kWarps = kThreads / 32;
// Pairs one launch pair handles (the grouping tables live in shared memory); more tokens run in
// chunks of 256 / k.
inline constexpr int kMaxPairs = 256;
inline constexpr int kMaxLocalExperts = kMaxRouteExperts;
// x rows of a pair group are staged in shared memory up to this size, else read through L1.
inline constexpr int kMaxStageBytes = 32 * 1024;

// Elements per 16-byte vector.
template <typename T>
inline constexpr int kVec = static_cast<int>(16 / sizeof(T));

// A weight vector: read once per launch, so it bypasses L1 (keeping x / act there) and asks L2
// for whole 256-byte sectors, which the neighbouring lanes use next.
__device__ __forceinline__ uint4 load_weights(const void* ptr) {
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(ptr));
  return v;
}

// An L2 cache policy for the weight loads: evict first (a weight line is read once per launch, so
// it should not push out what is read again: the down kernel's prefetched rows, activations,
// the rest of the step's data) or normal.
// Cache policies need sm_80; below, the policy is unused and the loads are plain load_weights.
__device__ __forceinline__ uint64_t weight_policy(bool evict_first) {
  uint64_t policy = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if (evict_first) {
    asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
  } else {
    asm("createpolicy.fractional.L2::evict_normal.b64 %0, 1.0;" : "=l"(policy));
  }
#endif
  return policy;
}

// load_weights with an L2 cache policy from weight_policy.
__device__ __forceinline__ uint4 load_weights(const void* ptr, uint64_t policy) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.L2::cache_hint.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(ptr), "l"(policy));
  return v;
#else
  return load_weights(ptr);
#endif
}

// Asks L2 for `bytes` (a multiple of 16) from the 16-byte aligned `ptr`, in the background: the
// thread does not wait, nothing lands in registers or shared memory. sm_90; else nothing.
__device__ __forceinline__ void prefetch_l2(const void* ptr, uint32_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(ptr), "r"(bytes) : "memory");
#endif
}

// The kVec<T> floats of a 16-byte vector.
template <typename T>
__device__ __forceinline__ void unpack(const uint4& v, float (&f)[kVec<T>]);
template <>
__device__ __forceinline__ void unpack<__nv_bfloat16>(const uint4& v, float (&f)[8]) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = __uint_as_float(w[i] << 16);
    f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
  }
}
template <>
__device__ __forceinline__ void unpack<__half>(const uint4& v, float (&f)[8]) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    __half2 h;
    memcpy(&h, &w[i], sizeof(h));
    const float2 t = __half22float2(h);
    f[2 * i] = t.x;
    f[2 * i + 1] = t.y;
  }
}
template <>
__device__ __forceinline__ void unpack<float>(const uint4& v, float (&f)[4]) {
  f[0] = __uint_as_float(v.x);
  f[1] = __uint_as_float(v.y);
  f[2] = __uint_as_float(v.z);
  f[3] = __uint_as_float(v.w);
}

// Where the decode kernels find a pair's local expert: map[id], or id itself where the host found
// the map to be the identity (no expert parallelism: identity_experts = E > 0). The identity skips
// a load that depends on the topk_ids load, so a CTA's first weight load waits on one L2 round
// trip fewer. -1: not on this rank (or out of range).
struct LocalExperts {
  const int32_t* map;
  int identity_experts;
  __device__ __forceinline__ int of(int id) const {
    const int m = identity_experts > 0 ? (id >= 0 && id < identity_experts ? id : -1) : map[id];
    return (m >= 0 && m < kMaxLocalExperts) ? m : -1;
  }
};

// The pairs of one launch grouped by local expert, in shared memory.
struct PairGroups {
  int num_experts;              // U: distinct local experts among the pairs
  int expert[kMaxPairs];        // local id of expert u, u in order of the expert's first pair
  int offset[kMaxPairs + 1];    // pairs of u: pair[offset[u] .. offset[u + 1]), ascending
  int pair[kMaxPairs];          //
  int local[kMaxPairs];         // local expert of pair p, -1 when not on this rank
  int slot[kMaxPairs];          // u of pair p
  int rank[kMaxPairs];          // position of p among the pairs of its expert
  int table[kMaxLocalExperts];  // local expert -> u, -1 while unseen
};

// group_pairs for at most 32 pairs (one token of top-k <= 32, or a few tokens): warp 0 holds
// one pair a lane and finds everything in registers (match_any: the lanes of an expert; its first
// lane numbers it and a scan over those first lanes gives the offsets), no table and one barrier
// where the general walk takes three and clears the table first. The same numbering and order as
// the general walk; slot, rank and table are not filled (only the walk itself reads them).
__device__ __forceinline__ void group_pairs_one_window(PairGroups& g, const int32_t* topk_ids,
                                                       LocalExperts experts, int num_pairs) {
  if (threadIdx.x < 32) {
    const int lane = static_cast<int>(threadIdx.x);
    const unsigned lower = (1u << lane) - 1u;
    int e = -1;
    if (lane < num_pairs) {
      e = experts.of(topk_ids[lane]);
      g.local[lane] = e;
    }
    const unsigned same = __match_any_sync(0xffffffffu, e);
    const bool first = e >= 0 && (same & lower) == 0;
    const unsigned firsts = __ballot_sync(0xffffffffu, first);
    const unsigned valid = __ballot_sync(0xffffffffu, e >= 0);
    // Exclusive prefix of the experts' pair counts, in order of their first lanes.
    const int count = first ? __popc(same) : 0;
    int inclusive = count;
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
      const int v = __shfl_up_sync(0xffffffffu, inclusive, d);
      if (lane >= d) inclusive += v;
    }
    const int offset = __shfl_sync(0xffffffffu, inclusive - count, __ffs(same) - 1);
    if (first) {
      const int u = __popc(firsts & lower);
      g.expert[u] = e;
      g.offset[u] = offset;
    }
    if (e >= 0) g.pair[offset + __popc(same & lower)] = lane;
    if (lane == 0) {
      g.num_experts = __popc(firsts);
      g.offset[__popc(firsts)] = __popc(valid);
    }
  }
  __syncthreads();
}

// Fills `g` for pairs 0..num_pairs-1; every thread of the block calls it. Warp 0 walks the pairs
// in windows of 32 (match_any finds the lanes that share an expert), so the numbering is
// deterministic and the pairs of an expert stay in ascending order.
__device__ __forceinline__ void group_pairs(PairGroups& g, const int32_t* topk_ids,
                                            LocalExperts local_experts, int num_pairs) {
  if (num_pairs <= 32) {
    group_pairs_one_window(g, topk_ids, local_experts, num_pairs);
    return;
  }
  for (int i = threadIdx.x; i < kMaxLocalExperts; i += blockDim.x) g.table[i] = -1;
  for (int p = threadIdx.x; p < num_pairs; p += blockDim.x) {
    g.local[p] = local_experts.of(topk_ids[p]);
  }
  __syncthreads();
  if (threadIdx.x < 32) {
    const int lane = static_cast<int>(threadIdx.x);
    const unsigned lower = (1u << lane) - 1u;
    int experts = 0;
    for (int base = 0; base < num_pairs; base += 32) {
      const int p = base + lane;
      const int e = p < num_pairs ? g.local[p] : -1;
      const unsigned same = __match_any_sync(0xffffffffu, e);
      const bool first_in_window = (same & lower) == 0;
      const bool fresh = e >= 0 && first_in_window && g.table[e] < 0;
      const unsigned fresh_mask = __ballot_sync(0xffffffffu, fresh);
      if (fresh) {
        const int u = experts + __popc(fresh_mask & lower);
        g.table[e] = u;
        g.expert[u] = e;
        g.offset[u] = 0;  // the count of u's pairs until the scan below
      }
      experts += __popc(fresh_mask);
      __syncwarp();
      if (e >= 0) {
        const int u = g.table[e];
        g.slot[p] = u;
        g.rank[p] = g.offset[u] + __popc(same & lower);
      }
      __syncwarp();
      if (e >= 0 && first_in_window) g.offset[g.table[e]] += __popc(same);
      __syncwarp();
    }
    // Counts -> exclusive offsets, 32 experts at a time.
    int running = 0;
    for (int base = 0; base < experts; base += 32) {
      const int u = base + lane;
      const int count = u < experts ? g.offset[u] : 0;
      int inclusive = count;
#pragma unroll
      for (int d = 1; d < 32; d <<= 1) {
        const int v = __shfl_up_sync(0xffffffffu, inclusive, d);
        if (lane >= d) inclusive += v;
      }
      if (u < experts) g.offset[u] = running + inclusive - count;
      running += __shfl_sync(0xffffffffu, inclusive, 31);
    }
    if (lane == 0) {
      g.offset[experts] = running;
      g.num_experts = experts;
    }
  }
  __syncthreads();
  for (int p = threadIdx.x; p < num_pairs; p += blockDim.x) {
    if (g.local[p] >= 0) g.pair[g.offset[g.slot[p]] + g.rank[p]] = p;
  }
  __syncthreads();
}

// One round of warp_dot's weight loads: vectors c0, c0 + 32, ..., c0 + 32 (V - 1) of each of the
// R rows (zeros past the row).
template <typename T, int R, int V>
__device__ __forceinline__ void warp_dot_round(uint4 (&w)[R][V], const T* const (&wrow)[R], int c0,
                                               int chunks, uint64_t policy) {
#pragma unroll
  for (int v = 0; v < V; ++v) {
    const int c = c0 + 32 * v;
#pragma unroll
    for (int r = 0; r < R; ++r) {
      w[r][v] = c < chunks ? load_weights(wrow[r] + static_cast<int64_t>(c) * kVec<T>, policy)
                           : make_uint4(0u, 0u, 0u, 0u);
    }
  }
}

// acc[r][n] += this lane's share of wrow[r] . xrow[n] over `len` elements, n < count. Lane l
// takes the 16-byte vectors l, l + 32, ...; V vectors of each of the R rows are loaded before the
// first is used, so R * V loads per lane are in flight. The caller reduces over the warp. With
// `use_first` the first round (c0 = lane) is `first`, which the caller loaded with warp_dot_round
// (the down kernel, before its pdl_wait).
template <typename T, int R, int NT, int V>
__device__ __forceinline__ void warp_dot(float (&acc)[R][NT], const T* const (&wrow)[R],
                                         const T* const (&xrow)[NT], int count, int len,
                                         uint64_t policy, const uint4 (&first)[R][V],
                                         bool use_first) {
  constexpr int kV = kVec<T>;
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int chunks = len / kV;
  for (int c0 = lane; c0 < chunks; c0 += 32 * V) {
    uint4 w[R][V];
    if (use_first && c0 == lane) {
#pragma unroll
      for (int v = 0; v < V; ++v) {
#pragma unroll
        for (int r = 0; r < R; ++r) w[r][v] = first[r][v];
      }
    } else {
      warp_dot_round<T, R, V>(w, wrow, c0, chunks, policy);
    }
    // With few x vectors a round (NT * V <= 4: one or two tokens), they are all loaded here,
    // behind the weights: loaded in the loop below, the vector of step v > 0 is asked for only
    // after step v - 1's weights arrived, one more L1 / L2 round trip a step (the down kernel's
    // act rows, which it does not stage).
    constexpr bool kXUpFront = NT * V <= 4;
    uint4 xv[kXUpFront ? V : 1][kXUpFront ? NT : 1];
    if constexpr (kXUpFront) {
#pragma unroll
      for (int v = 0; v < V; ++v) {
        const int c = min(c0 + 32 * v, chunks - 1);  // past the row: a valid vector, unused
#pragma unroll
        for (int n = 0; n < NT; ++n) {
          xv[v][n] = *reinterpret_cast<const uint4*>(xrow[n] + static_cast<int64_t>(c) * kV);
        }
      }
    }
#pragma unroll
    for (int v = 0; v < V; ++v) {
      const int c = c0 + 32 * v;
      if (c >= chunks) break;
      float wf[R][kV];
#pragma unroll
      for (int r = 0; r < R; ++r) unpack<T>(w[r][v], wf[r]);
#pragma unroll
      for (int n = 0; n < NT; ++n) {
        if (n >= count) break;
        float xf[kV];
        if constexpr (kXUpFront) {
          unpack<T>(xv[v][n], xf);
        } else {
          unpack<T>(*reinterpret_cast<const uint4*>(xrow[n] + static_cast<int64_t>(c) * kV), xf);
        }
#pragma unroll
        for (int r = 0; r < R; ++r) {
#pragma unroll
          for (int i = 0; i < kV; ++i) acc[r][n] = fmaf(wf[r][i], xf[i], acc[r][n]);
        }
      }
    }
  }
}

struct UpParams {
  const void* x = nullptr;  // [tokens, hidden] T
  const int32_t* topk_ids = nullptr;
  const float* topk_weights = nullptr;
  LocalExperts experts{};
  const void* w13 = nullptr;
  const void* b13 = nullptr;
  void* act = nullptr;  // [num_pairs, inter] T
  int num_pairs = 0, top_k = 0, hidden = 0, inter = 0;
  int units_per_cta = 0;  // act columns per CTA
  // Every token's x row is copied to shared memory once, before the pairs are grouped, when all
  // fit in kMaxStageBytes (decode: up to 8 tokens of 2048 BF16); else the x rows of each pair
  // group when they fit (stage_x), else x is read through L1.
  bool stage_all = false;
  bool stage_x = false;
  bool weight_on_input = false;
  bool evict_first = true;  // the weights' L2 policy (weight_policy)
  // Bytes of its first expert's rows a CTA asks L2 for before it groups the pairs (0: none).
  int64_t prefetch_bytes = 0;
  MoEActParams act_params;
};

// Asks L2 for `bytes` from `ptr` (16-byte aligned) in pieces of 16 KB spread over the lanes of
// one warp (every lane calls it); the tail below 16 bytes is left out.
__device__ __forceinline__ void warp_prefetch_l2(const void* ptr, int64_t bytes) {
  constexpr int64_t kPiece = 16 * 1024;
  bytes = bytes / 16 * 16;
  const char* base = static_cast<const char*>(ptr);
  for (int64_t offset = static_cast<int64_t>(threadIdx.x % 32) * kPiece; offset < bytes;
       offset += 32 * kPiece) {
    prefetch_l2(base + offset, static_cast<uint32_t>(min(kPiece, bytes - offset)));
  }
}

// act[p, unit] = act_fn(s * (W13[e][unit] . x[t]) + b, s * (W13[e][I + unit] . x[t]) + b') for
// the pairs p = t*k + j of expert e; s = w[t, 0] with weight_on_input (W (s x) = s (W x), so x
// stays exact in T), else 1. R = rows per warp item: UW gate rows then UW up rows (gated).
template <typename T, int NT, int UW, int V, bool kGated>
__global__ void __launch_bounds__(kThreads, 2) decode_up_kernel(const UpParams p) {
  constexpr int R = kGated ? 2 * UW : UW;
  static_assert(UW * NT <= 32, "one lane stores each (unit, pair) result");
  __shared__ PairGroups g;
  extern __shared__ uint4 x_stage[];  // [tokens, hidden] T (stage_all) or [NT, hidden] (stage_x)

  // Programmatic dependent launch (pdl.cuh): topk_ids / x come from the kernels before, so
  // nothing is read before the wait; the expert of the weights to prefetch is not known earlier.
  pdl_wait();
  pdl_launch_dependents();
  const int64_t n1 = kGated ? 2 * static_cast<int64_t>(p.inter) : p.inter;
  const int unit_begin = static_cast<int>(blockIdx.x) * p.units_per_cta;
  const int unit_end = min(unit_begin + p.units_per_cta, p.inter);

  // Grouping the pairs takes several round trips through L2 and shared memory before the first
  // weight load; start the CTA's first rows towards L2 meanwhile. Its first expert u = blockIdx.y
  // is the expert of pair blockIdx.y when that pair and the ones before it are local (a token's
  // k experts are distinct, so pairs 0..k-1 are the first k distinct experts; a wrong guess only
  // costs bandwidth). Warp 0 checks and asks for up to prefetch_bytes of its gate (and up) rows.
  const int y = static_cast<int>(blockIdx.y);
  if (p.prefetch_bytes > 0 && threadIdx.x < 32 && y < min(min(p.top_k, p.num_pairs), 32)) {
    const int lane = static_cast<int>(threadIdx.x);
    const int e = lane <= y ? p.experts.of(p.topk_ids[lane]) : 0;
    const int first = __shfl_sync(0xffffffffu, e, y);
    if (__all_sync(0xffffffffu, e >= 0)) {
      const T* w_e = static_cast<const T*>(p.w13) + static_cast<int64_t>(first) * n1 * p.hidden;
      const int64_t rows_bytes =
          static_cast<int64_t>(unit_end - unit_begin) * p.hidden * static_cast<int64_t>(sizeof(T));
      const int64_t each = min(rows_bytes, kGated ? p.prefetch_bytes / 2 : p.prefetch_bytes);
      warp_prefetch_l2(w_e + static_cast<int64_t>(unit_begin) * p.hidden, each);
      if constexpr (kGated) {
        warp_prefetch_l2(w_e + static_cast<int64_t>(p.inter + unit_begin) * p.hidden, each);
      }
    }
  }
  if (p.stage_all) {  // group_pairs' barriers publish the rows
    const int vectors = p.num_pairs / p.top_k * (p.hidden / kVec<T>);
    for (int i = static_cast<int>(threadIdx.x); i < vectors; i += kThreads) {
      x_stage[i] = reinterpret_cast<const uint4*>(p.x)[i];
    }
  }
  group_pairs(g, p.topk_ids, p.experts, p.num_pairs);

  const T* x = p.stage_all ? reinterpret_cast<const T*>(x_stage) : static_cast<const T*>(p.x);
  const T* w13 = static_cast<const T*>(p.w13);
  const T* b13 = static_cast<const T*>(p.b13);
  T* act = static_cast<T*>(p.act);
  const int warp = static_cast<int>(threadIdx.x / 32);
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int64_t hidden = p.hidden;
  const uint64_t policy = weight_policy(p.evict_first);

  for (int u = static_cast<int>(blockIdx.y); u < g.num_experts; u += static_cast<int>(gridDim.y)) {
    const int e = g.expert[u];
    const T* w_e = w13 + static_cast<int64_t>(e) * n1 * hidden;
    const int group_end = g.offset[u + 1];
    for (int first = g.offset[u]; first < group_end; first += NT) {
      const int count = min(NT, group_end - first);
      int pair[NT];
      const T* xrow[NT];
      float scale[NT];
#pragma unroll
      for (int n = 0; n < NT; ++n) {
        pair[n] = g.pair[first + min(n, count - 1)];
        xrow[n] = x + static_cast<int64_t>(pair[n] / p.top_k) * hidden;
        scale[n] = p.weight_on_input ? p.topk_weights[pair[n]] : 1.0f;
      }
      if (p.stage_x && !p.stage_all) {
        __syncthreads();  // the previous group's rows are no longer read
        const int chunks = static_cast<int>(hidden / kVec<T>);
        for (int i = static_cast<int>(threadIdx.x); i < count * chunks; i += kThreads) {
          const int n = i / chunks;
          const int64_t token = g.pair[first + n] / p.top_k;
          x_stage[i] = reinterpret_cast<const uint4*>(static_cast<const T*>(p.x) +
                                                      token * hidden)[i - n * chunks];
        }
        __syncthreads();
#pragma unroll
        for (int n = 0; n < NT; ++n) {
          xrow[n] = reinterpret_cast<const T*>(x_stage) + min(n, count - 1) * hidden;
        }
      }
      for (int unit0 = unit_begin + warp * UW; unit0 < unit_end; unit0 += kWarps * UW) {
        const T* wrow[R];
#pragma unroll
        for (int j = 0; j < UW; ++j) {
          const int64_t unit = min(unit0 + j, p.inter - 1);  // tail units load a valid row
          wrow[j] = w_e + unit * hidden;
          if constexpr (kGated) wrow[UW + j] = w_e + (p.inter + unit) * hidden;
        }
        float acc[R][NT] = {};
        const uint4 none[R][V] = {};
        warp_dot<T, R, NT, V>(acc, wrow, xrow, count, p.hidden, policy, none, false);
#pragma unroll
        for (int j = 0; j < UW; ++j) {
#pragma unroll
          for (int n = 0; n < NT; ++n) {
            if (n >= count) break;
            float gate = warp_sum(acc[j][n]) * scale[n];
            float up = 0.0f;
            if constexpr (kGated) up = warp_sum(acc[UW + j][n]) * scale[n];
            const int unit = unit0 + j;
            if (lane == j * NT + n && unit < unit_end) {
              if (b13 != nullptr) {
                gate += to_float(b13[e * n1 + unit]);
                if constexpr (kGated) up += to_float(b13[e * n1 + p.inter + unit]);
              }
              act[static_cast<int64_t>(pair[n]) * p.inter + unit] =
                  from_float<T>(moe_activation(p.act_params, gate, up));
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
  LocalExperts experts{};
  const void* w2 = nullptr;
  const void* b2 = nullptr;
  const void* act = nullptr;  // [num_pairs, inter] T
  void* out = nullptr;        // [num_tokens, hidden] T
  int num_pairs = 0, num_tokens = 0, top_k = 0, hidden = 0, inter = 0;
  int rows_per_cta = 0;  // output columns h per CTA
  bool weight_on_input = false;
  bool evict_first = true;  // the weights' L2 policy (weight_policy)
  // Bytes of its W2 rows a CTA prefetches into L2 before it waits for act (0: none), in the order
  // it reads them; bounded so that the prefetched rows of all CTAs fit in L2 beside the rest.
  int64_t prefetch_bytes = 0;
};

// out[t, h] = sum_j w'[t, j] * (W2[e][h] . act[t*k + j] + b2[e][h]) for the CTA's rows h. The dot
// products land in shared memory, partial[p, h - row_begin], so each sum runs over j in order.
template <typename T, int NT, int R, int V>
__global__ void __launch_bounds__(kThreads, 2) decode_down_kernel(const DownParams p) {
  static_assert(R * NT <= 32, "one lane stores each (row, pair) result");
  __shared__ PairGroups g;
  extern __shared__ float partial[];  // [num_pairs, rows_per_cta]

  // The one kernel that reads another kernel's output before pdl_wait (pdl.cuh, rule 3): it is
  // launched right after the up kernel (launch_chunk), which calls pdl_launch_dependents only
  // after its own pdl_wait, so the routing kernel that wrote topk_ids had completed before this
  // kernel could start; nothing writes them since. act is the up kernel's output: read after the
  // wait below. expert_map is a weight.
  group_pairs(g, p.topk_ids, p.experts, p.num_pairs);

  const T* w2 = static_cast<const T*>(p.w2);
  const T* b2 = static_cast<const T*>(p.b2);
  const T* act = static_cast<const T*>(p.act);
  T* out = static_cast<T*>(p.out);
  const int warp = static_cast<int>(threadIdx.x / 32);
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int64_t hidden = p.hidden;
  const int row_begin = static_cast<int>(blockIdx.x) * p.rows_per_cta;
  const int rows = min(p.rows_per_cta, p.hidden - row_begin);
  const int row_groups = (rows + R - 1) / R;

  // The weights do not depend on the up kernel: while it still streams W13, ask L2 for this
  // CTA's W2 rows (per expert one contiguous block of rows * inter elements), in pieces of
  // kPrefetchPiece bytes spread over the threads, up to p.prefetch_bytes.
  if (p.prefetch_bytes > 0) {
    constexpr int64_t kPrefetchPiece = 16 * 1024;
    const int64_t block_bytes = static_cast<int64_t>(rows) * p.inter * sizeof(T);
    const int64_t pieces_per_expert = (block_bytes + kPrefetchPiece - 1) / kPrefetchPiece;
    const int64_t budget_pieces = (p.prefetch_bytes + kPrefetchPiece - 1) / kPrefetchPiece;
    const int64_t pieces = min(pieces_per_expert * g.num_experts, budget_pieces);
    for (int64_t i = threadIdx.x; i < pieces; i += kThreads) {
      const int u = static_cast<int>(i / pieces_per_expert);
      const int64_t offset = (i - u * pieces_per_expert) * kPrefetchPiece;
      const char* block = reinterpret_cast<const char*>(
          w2 + (static_cast<int64_t>(g.expert[u]) * hidden + row_begin) * p.inter);
      prefetch_l2(block + offset, static_cast<uint32_t>(min(kPrefetchPiece, block_bytes - offset)));
    }
  }
  // The weight rows of row group rg of expert e (tail rows load a valid row).
  const auto weight_rows = [&](int e, int rg, const T*(&wrow)[R]) {
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int64_t h = row_begin + min(rg * R + r, rows - 1);
      wrow[r] = w2 + (static_cast<int64_t>(e) * hidden + h) * p.inter;
    }
  };
  // At one token, this warp's first item (item `warp` of the walk below) has its first round of
  // weight vectors loaded here, before the wait, as the GEMVs do theirs (linear_gemv_cuda.cuh):
  // the weights and the pair groups are known, so those bytes stream while the up kernel still
  // runs, and after the wait the round needs only its act vectors. q48 decode 344.1 -> 348.5
  // tokens/s (docs/performance.md, issue 15, session 34). Held across the wait, the round costs
  // registers: at 2, 4 and 8 tokens the tiles the rule takes spilled with it (40, 84 and 148 bytes
  // at the 128-register cap), and so did the one-token 4 x 4 tile (340 bytes), so those keep
  // loading it after the wait.
  const uint64_t policy = weight_policy(p.evict_first);
  constexpr bool kFirstRoundEarly = NT == 1 && R * V <= 8;
  uint4 first_round[R][V] = {};
  if constexpr (kFirstRoundEarly) {
    int u = 0, base = 0, groups = 0;
    for (; u < g.num_experts; ++u, base += groups * row_groups) {
      groups = (g.offset[u + 1] - g.offset[u] + NT - 1) / NT;
      if (warp < base + groups * row_groups) break;
    }
    if (u < g.num_experts) {  // else the warp has no item
      const T* wrow[R];
      weight_rows(g.expert[u], (warp - base) % row_groups, wrow);
      warp_dot_round<T, R, V>(first_round, wrow, lane, p.inter / kVec<T>, policy);
    }
  }
  pdl_wait();
  pdl_launch_dependents();  // the next kernel (the residual add + norm) may get resident

  // Work items (expert, pair group, row group) dealt round-robin to the warps.
  int item = 0;
  for (int u = 0; u < g.num_experts; ++u) {
    const int e = g.expert[u];
    const int group_end = g.offset[u + 1];
    for (int first = g.offset[u]; first < group_end; first += NT) {
      for (int rg = 0; rg < row_groups; ++rg, ++item) {
        if (item % kWarps != warp) continue;
        const int count = min(NT, group_end - first);
        int pair[NT];
        const T* xrow[NT];
#pragma unroll
        for (int n = 0; n < NT; ++n) {
          pair[n] = g.pair[first + min(n, count - 1)];
          xrow[n] = act + static_cast<int64_t>(pair[n]) * p.inter;
        }
        const T* wrow[R];
        weight_rows(e, rg, wrow);
        float acc[R][NT] = {};
        warp_dot<T, R, NT, V>(acc, wrow, xrow, count, p.inter, policy, first_round,
                              kFirstRoundEarly && item == warp);
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

  for (int i = static_cast<int>(threadIdx.x); i < p.num_tokens * rows; i += kThreads) {
    const int t = i / rows;
    const int r = i - t * rows;
    const int64_t h = row_begin + r;
    float sum = 0.0f;
    for (int j = 0; j < p.top_k; ++j) {
      const int pr = t * p.top_k + j;
      const int e = g.local[pr];
      if (e < 0) continue;
      float y = partial[pr * p.rows_per_cta + r];
      if (b2 != nullptr) y += to_float(b2[e * hidden + h]);
      sum += (p.weight_on_input ? 1.0f : p.topk_weights[pr]) * y;
    }
    out[t * hidden + h] = from_float<T>(sum);
  }
}

// Tile sizes of the launches (decode_experts_cuda.h). The unit and row defaults were the best of
// the kernel author's sweep on an H100 over the four bench shapes (each within 4% of the best of
// 16 / 32 / 64 units); `mg_cuda_tests --gtest_filter='DecodeExpertsCuda.TimesTilesOnTheQwen3Shape'`
// times the variants on the qwen3 shape and `moegraph bench moe --kernel decode --tokens 1,4,16`
// the defaults on the whole layer.
using Tiles = DecodeExpertsTiles;

// Multiprocessors of the current device, read once (the devices of a process are one model).
inline int multiprocessor_count() {
  static const int count = [] {
    int device = 0, sms = 0;
    MG_CUDA_CHECK(cudaGetDevice(&device));
    MG_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    return sms;
  }();
  return count;
}

// Act columns per up CTA. Below 2048 columns the grid is cut by the SMs: at one token its
// min(k, up_expert_slots) expert slots x the unit tiles make one wave of two CTAs an SM, above it
// two waves, with the units a whole number of passes of the kWarps warps. The H200 sweep
// (DecodeExpertsCuda.TimesTilesOnTheQwen3Shape, session 24) on qwen3's I = 768: 24 units (32
// tiles) at M = 1 / 2 / 4 / 8 took 24.8 / 46.1 / 81.8 / 157.7 us against the former rule's 32 /
// 16 / 16 / 16 units' 27.2 / 47.5 / 82.9 / 160.5; 20 units (39 tiles: past the wave at M = 1)
// 29.9 at M = 1.
inline int up_units_per_cta(const Tiles& tiles, int64_t inter, int64_t tokens, int64_t top_k) {
  if (tiles.up_units_per_cta > 0) return tiles.up_units_per_cta;
  if (inter >= 2048) return 64;
  const int64_t slots =
      std::max<int64_t>(1, std::min<int64_t>(tokens * top_k, tiles.up_expert_slots));
  const int64_t waves = tokens == 1 ? 1 : 2;
  const int64_t unit_tiles = std::max<int64_t>(1, 2 * waves * multiprocessor_count() / slots);
  const int64_t units = (inter + unit_tiles - 1) / unit_tiles;
  return static_cast<int>((units + kWarps - 1) / kWarps * kWarps);
}

// L2 bytes of the current device, read once.
inline int64_t l2_cache_bytes() {
  static const int64_t bytes = [] {
    int device = 0, l2 = 0;
    MG_CUDA_CHECK(cudaGetDevice(&device));
    MG_CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device));
    return static_cast<int64_t>(l2);
  }();
  return bytes;
}

// The prefetch budget of one down CTA: the prefetched rows of all CTAs take at most half of L2
// (the rest holds the up kernel's evict-first stream and the step's activations), so a row is not
// evicted before it is read; where the experts' rows are more (many tokens, large experts) the
// first half is prefetched and the rest streams as before.
inline int64_t down_prefetch_bytes(const Tiles& tiles, int64_t ctas) {
  if (!tiles.down_prefetch) return 0;
  return l2_cache_bytes() / 2 / std::max<int64_t>(ctas, 1);
}

// Rows per down CTA for `rows_in_group` rows per warp item: 2 CTAs per SM in one wave.
inline int down_rows_per_cta(const Tiles& tiles, int64_t hidden, int rows_in_group) {
  if (tiles.down_rows_per_cta > 0) return tiles.down_rows_per_cta;
  const int64_t ctas = 2 * static_cast<int64_t>(multiprocessor_count());
  const int64_t rows = (hidden + ctas - 1) / ctas;
  return static_cast<int>((rows + rows_in_group - 1) / rows_in_group * rows_in_group);
}

// The parameters of one chunk of tokens [t0, t0 + tokens).
template <typename T>
UpParams up_params(const DecodeExpertsArgs& a, int64_t t0, int64_t tokens, int nt,
                   const Tiles& tiles) {
  UpParams p;
  p.x = static_cast<const T*>(a.x) + t0 * a.hidden;
  p.topk_ids = a.topk_ids + t0 * a.top_k;
  p.topk_weights = a.topk_weights + t0 * a.top_k;
  p.experts = {a.expert_map, a.identity_experts};
  p.w13 = a.w13;
  p.b13 = a.b13;
  p.act = a.act_scratch;
  p.num_pairs = static_cast<int>(tokens * a.top_k);
  p.top_k = static_cast<int>(a.top_k);
  p.hidden = static_cast<int>(a.hidden);
  p.inter = static_cast<int>(a.inter);
  p.units_per_cta = up_units_per_cta(tiles, a.inter, tokens, a.top_k);
  const int64_t row_bytes = a.hidden * static_cast<int64_t>(sizeof(T));
  p.stage_all = tokens * row_bytes <= kMaxStageBytes;
  p.stage_x = !p.stage_all && nt * row_bytes <= kMaxStageBytes;
  p.weight_on_input = a.weight_on_input;
  p.evict_first = tiles.evict_first;
  if (tiles.up_prefetch) {
    // A quarter of L2 over the CTAs that prefetch (those of the first min(k, pairs) experts).
    const int64_t ctas =
        (a.inter + p.units_per_cta - 1) / p.units_per_cta *
        std::min<int64_t>(std::min<int64_t>(a.top_k, p.num_pairs), tiles.up_expert_slots);
    p.prefetch_bytes = l2_cache_bytes() / 4 / std::max<int64_t>(ctas, 1);
  }
  p.act_params = a.act;
  return p;
}

template <typename T>
DownParams down_params(const DecodeExpertsArgs& a, int64_t t0, int64_t tokens, int rows_per_cta,
                       const Tiles& tiles) {
  DownParams p;
  p.topk_ids = a.topk_ids + t0 * a.top_k;
  p.topk_weights = a.topk_weights + t0 * a.top_k;
  p.experts = {a.expert_map, a.identity_experts};
  p.w2 = a.w2;
  p.b2 = a.b2;
  p.act = a.act_scratch;
  p.out = static_cast<T*>(a.out) + t0 * a.hidden;
  p.num_pairs = static_cast<int>(tokens * a.top_k);
  p.num_tokens = static_cast<int>(tokens);
  p.top_k = static_cast<int>(a.top_k);
  p.hidden = static_cast<int>(a.hidden);
  p.inter = static_cast<int>(a.inter);
  p.rows_per_cta = rows_per_cta;
  p.weight_on_input = a.weight_on_input;
  p.evict_first = tiles.evict_first;
  p.prefetch_bytes = down_prefetch_bytes(tiles, (a.hidden + rows_per_cta - 1) / rows_per_cta);
  return p;
}

// Both kernels go through launch_pdl_if (pdl.cuh): with programmatic dependent launch unless
// tiles.pdl is off or MG_PDL=0.
template <typename T, int NT, int UW, int V, bool kGated>
void launch_up(const UpParams& p, const Tiles& tiles, cudaStream_t stream) {
  const dim3 grid((p.inter + p.units_per_cta - 1) / p.units_per_cta,
                  std::min(p.num_pairs, tiles.up_expert_slots));
  const int64_t rows = p.stage_all ? p.num_pairs / p.top_k : p.stage_x ? NT : 0;
  const size_t smem = static_cast<size_t>(rows * p.hidden) * sizeof(T);
  launch_pdl_if(tiles.pdl, decode_up_kernel<T, NT, UW, V, kGated>, grid, dim3(kThreads), smem,
                stream, p);
}

template <typename T, int NT, int R, int V>
void launch_down(const DownParams& p, const Tiles& tiles, cudaStream_t stream) {
  const dim3 grid((p.hidden + p.rows_per_cta - 1) / p.rows_per_cta);
  const size_t smem = static_cast<size_t>(p.num_pairs) * p.rows_per_cta * sizeof(float);
  MG_CHECK(smem <= 48 * 1024,
           "decode experts: {} pairs x {} rows per down CTA need {} bytes of shared memory, more "
           "than 48 KB",
           p.num_pairs, p.rows_per_cta, smem);
  // The down kernel reads topk_ids before its wait, which is sound only right after the up
  // kernel (decode_down_kernel): alone (Parts::kDownOnly, the timing test) it is an ordinary
  // launch.
  const bool after_up = tiles.parts == Tiles::Parts::kBoth;
  launch_pdl_if(tiles.pdl && after_up, decode_down_kernel<T, NT, R, V>, grid, dim3(kThreads), smem,
                stream, p);
}

// The variants. Up: a warp item is one gated unit (gate and up row) or two plain units, of
// up_vectors 16-byte vectors each (4 by default: eight loads per lane in flight; 8 halves the
// passes over a 2048-element BF16 row). Down: two rows of four vectors, or four rows of two when
// the act rows of a pair group far overflow L1 (Mixtral, I = 14336, at NT 8: 229 KB): then every
// act vector read serves four weight rows instead of two (15-25% faster there, 5-20% slower where
// act stays in L1 or near it, GPT-OSS at 46 KB, in the same sweep); or four rows of four.
template <typename T, int NT>
void launch_up_variant(const DecodeExpertsArgs& a, const UpParams& up, const Tiles& tiles,
                       cudaStream_t stream) {
  const int vectors = tiles.up_vectors > 0 ? tiles.up_vectors : 4;
  MG_CHECK(vectors == 4 || vectors == 8, "decode experts: up_vectors must be 4 or 8, got {}",
           vectors);
  const bool gated = is_gated(a.act.kind);
  if (gated && vectors == 4) return launch_up<T, NT, 1, 4, true>(up, tiles, stream);
  if (gated) return launch_up<T, NT, 1, 8, true>(up, tiles, stream);
  if (vectors == 4) return launch_up<T, NT, 2, 4, false>(up, tiles, stream);
  launch_up<T, NT, 2, 8, false>(up, tiles, stream);
}

template <typename T, int NT>
void launch_down_variant(const DecodeExpertsArgs& a, int64_t t0, int64_t tokens, const Tiles& tiles,
                         cudaStream_t stream) {
  int rows_per_warp = tiles.down_rows_per_warp, vectors = tiles.down_vectors;
  if (rows_per_warp == 0 && vectors == 0) {
    // 4 rows x 2 vectors where the activations overflow L1, and below 8 tokens: the H100 sweep
    // (DecodeExpertsCuda.TimesTilesOnTheQwen3Shape, session 8) timed 4x2 at 31.3 / 58.9 / 104.4 us
    // for M = 1 / 2 / 4 against 2x4's 32.9 / 60.5 / 108.1, and slower at 8 (210.0 vs 187.8). The
    // H200 agrees at 8 tokens: `bench serve q48 --batch 8` decoded 747 tokens/s with 2x4 there
    // and 676 with 4x2 (session 24; the sweep's own 8-token numbers drift with the variant's
    // place in the run, the later one faster, so it was read from the whole model).
    const bool act_overflows_l1 =
        static_cast<int64_t>(NT) * a.inter * static_cast<int64_t>(sizeof(T)) > 128 * 1024;
    const bool four_rows = act_overflows_l1 || NT < 8;
    rows_per_warp = four_rows ? 4 : 2;
    vectors = four_rows ? 2 : 4;
  }
  const int rows = down_rows_per_cta(tiles, a.hidden, rows_per_warp);
  const DownParams down = down_params<T>(a, t0, tokens, rows, tiles);
  if (rows_per_warp == 2 && vectors == 4) return launch_down<T, NT, 2, 4>(down, tiles, stream);
  if (rows_per_warp == 4 && vectors == 2) return launch_down<T, NT, 4, 2>(down, tiles, stream);
  if (rows_per_warp == 4 && vectors == 4) return launch_down<T, NT, 4, 4>(down, tiles, stream);
  MG_CHECK(false, "decode experts: down rows per warp x vectors must be 2x4, 4x2 or 4x4, got {}x{}",
           rows_per_warp, vectors);
}

// The up launch of a chunk with NT pairs a pass.
template <typename T, int NT>
void launch_up_chunk(const DecodeExpertsArgs& a, int64_t t0, int64_t tokens, const Tiles& tiles,
                     cudaStream_t stream) {
  launch_up_variant<T, NT>(a, up_params<T>(a, t0, tokens, NT, tiles), tiles, stream);
}

template <typename T, int NT>
void launch_chunk(const DecodeExpertsArgs& a, int64_t t0, int64_t tokens, const Tiles& tiles,
                  cudaStream_t stream) {
  if (tiles.parts != Tiles::Parts::kDownOnly) {
    // Up to 4 pairs a pass by default: at 5-8 tokens an expert rarely has more than 4 pairs, and
    // 8 cost the kernel registers (it spilled) for nothing. The H200 sweep at M = 8: 4 pairs a
    // pass 154.6 us, the launch's 8 163.1 (then the same variant later in the call 160.4).
    const int up_nt = tiles.up_pairs_per_pass > 0 ? tiles.up_pairs_per_pass : std::min(NT, 4);
    MG_CHECK(up_nt == 1 || up_nt == 2 || up_nt == 4 || up_nt == 8,
             "decode experts: up_pairs_per_pass must be 1, 2, 4 or 8, got {}", up_nt);
    if (up_nt == 1) launch_up_chunk<T, 1>(a, t0, tokens, tiles, stream);
    if (up_nt == 2) launch_up_chunk<T, 2>(a, t0, tokens, tiles, stream);
    if (up_nt == 4) launch_up_chunk<T, 4>(a, t0, tokens, tiles, stream);
    if (up_nt == 8) launch_up_chunk<T, 8>(a, t0, tokens, tiles, stream);
  }
  if (tiles.parts != Tiles::Parts::kUpOnly) {
    launch_down_variant<T, NT>(a, t0, tokens, tiles, stream);
  }
}

}  // namespace mg::cuda::decode

namespace mg::cuda {

namespace decode {

// launch_decode_experts with explicit tiles (for sweeping them).
template <typename T>
void launch_tiled(const DecodeExpertsArgs& args, const Tiles& tiles, cudaStream_t stream) {
  if (args.num_tokens <= 0) return;
  MG_ASSERT(decode_experts_check(args.hidden, args.inter).empty(), "decode experts: {}",
            decode_experts_check(args.hidden, args.inter));
  MG_ASSERT(args.top_k >= 1 && args.top_k <= kMaxPairs, "decode experts: top_k {}", args.top_k);
  MG_ASSERT(!args.weight_on_input || args.top_k == 1,
            "decode experts: weight_on_input needs top_k 1, got {}", args.top_k);
  const int64_t chunk = kMaxPairs / args.top_k;
  for (int64_t t0 = 0; t0 < args.num_tokens; t0 += chunk) {
    const int64_t tokens = std::min(chunk, args.num_tokens - t0);
    // NT, the pairs a weight row is dotted with at once, follows the tokens: at M = 1 every
    // expert has one pair, and a larger NT only costs registers.
    if (tokens == 1) {
      launch_chunk<T, 1>(args, t0, tokens, tiles, stream);
    } else if (tokens == 2) {
      launch_chunk<T, 2>(args, t0, tokens, tiles, stream);
    } else if (tokens <= 4) {
      launch_chunk<T, 4>(args, t0, tokens, tiles, stream);
    } else {
      launch_chunk<T, 8>(args, t0, tokens, tiles, stream);
    }
  }
}

}  // namespace decode

template <typename T>
void launch_decode_experts(const DecodeExpertsArgs& args, cudaStream_t stream) {
  decode::launch_tiled<T>(args, decode::Tiles{}, stream);
}

template <typename T>
void launch_decode_experts_tiled(const DecodeExpertsArgs& args, const DecodeExpertsTiles& tiles,
                                 cudaStream_t stream) {
  decode::launch_tiled<T>(args, tiles, stream);
}

}  // namespace mg::cuda
