// CUDA routing kernel (included by moe_routing_cuda_<dtype>.cu). Mirrors ops/moe/router/routing.cc
// step for step; read that file first.
//
// One warp per row, the whole row in registers. With V elements per 16 bytes, lane l holds the
// vectors [c*32*V + l*V, +V) for chunk c = 0..kChunks-1: the loads are coalesced and every lane
// meets its own experts in ascending order. Top-k is k rounds of a warp argmax over a 32-bit
// order-preserving key (redux.sync for the largest key, then for the lowest expert holding it),
// which is exactly the host's "ties -> lower index". Grouped top-k runs inside the same kernel:
// one group score per lane (so at most 32 groups), the kept groups as a ballot mask.
//
// Exactness: ids must equal the host's even between scores one ulp apart, so every selection
// score is the host's value bit for bit: the same operations in the same order (the softmax sum
// serially), a correctly rounded exp, and __fmul_rn / __fadd_rn where nvcc would otherwise
// contract `e * inv_sum + bias` into an FMA that the host does not do.
#pragma once

#include <cfloat>
#include <cstdint>

#include "framework/core/error.h"
#include "framework/device/cuda/cuda_check.h"
#include "framework/device/cuda/cuda_utils.cuh"
#include "framework/device/cuda/pdl.cuh"
#include "ops/moe/cuda/moe_routing_cuda.h"

namespace mg::cuda {
namespace route_detail {

constexpr int kWarpsPerBlock = 4;  // rows per block; small blocks fill the GPU at decode sizes
constexpr unsigned kFullMask = 0xffffffffu;
constexpr uint32_t kRemovedKey = 0;  // below every real key: order_key(-inf) = 0x007fffff
constexpr float kRenormEpsilon = 1e-20f;

__device__ __forceinline__ float neg_inf() {
  return __int_as_float(static_cast<int>(0xff800000u));
}

// NaN -> -inf, +inf -> the largest float (routing.h).
__device__ __forceinline__ float sanitize_logit(float l) {
  return isnan(l) ? neg_inf() : fminf(l, FLT_MAX);
}

// Selection key: NaN counts as -inf.
__device__ __forceinline__ float key_of(float c) {
  return isnan(c) ? neg_inf() : c;
}

// Order-preserving map of a non-NaN float to uint32 (a > b <=> order_key(a) > order_key(b)).
// -0 becomes +0 first so that the two tie, as they do in the host's float compare.
__device__ __forceinline__ uint32_t order_key(float f) {
  const uint32_t u = __float_as_uint(f == 0.0f ? 0.0f : f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
__device__ __forceinline__ float key_value(uint32_t key) {
  return __uint_as_float((key & 0x80000000u) ? (key & 0x7fffffffu) : ~key);
}

// expf correctly rounded: exp in double (Cody-Waite reduction, r in [-ln2/2, ln2/2], degree-13
// Taylor polynomial, error < 2^-56) rounded once to float. The host's expf (glibc, < 0.502 ulp)
// returns the same float but for near-half-way cases (~1 in 2000 arguments), where CUDA's expf
// (up to 2 ulp) differs far more often; an ulp moved in a selection score flips near-ties
// against the host. Written out rather than exp(double) so that no slow-path call spills.
__device__ __forceinline__ float exp_rn(float xf) {
  if (xf > 89.0f) return __int_as_float(0x7f800000);  // overflows in fp32 anyway
  if (!(xf >= -104.0f)) return 0.0f;                  // below half the least subnormal; -inf
  const double x = xf;
  const double kd = rint(x * 0x1.71547652b82fep0);  // x / ln2
  double r = fma(kd, -0x1.62e42fefa39efp-1, x);     // x - kd * ln2, ln2 = hi + lo
  r = fma(kd, -0x1.abc9e3b39803fp-56, r);
  double poly = 1.0 / 6227020800.0;  // 1/13!
  poly = fma(poly, r, 1.0 / 479001600.0);
  poly = fma(poly, r, 1.0 / 39916800.0);
  poly = fma(poly, r, 1.0 / 3628800.0);
  poly = fma(poly, r, 1.0 / 362880.0);
  poly = fma(poly, r, 1.0 / 40320.0);
  poly = fma(poly, r, 1.0 / 5040.0);
  poly = fma(poly, r, 1.0 / 720.0);
  poly = fma(poly, r, 1.0 / 120.0);
  poly = fma(poly, r, 1.0 / 24.0);
  poly = fma(poly, r, 1.0 / 6.0);
  poly = fma(poly, r, 0.5);
  poly = fma(poly, r, 1.0);
  poly = fma(poly, r, 1.0);
  const double scale = __longlong_as_double((static_cast<long long>(kd) + 1023) << 52);  // 2^kd
  return __double2float_rn(poly * scale);
}

// The host's sigmoid, 1 / (1 + exp(-l)) in fp32.
__device__ __forceinline__ float route_sigmoid(float l) {
  return __fdiv_rn(1.0f, __fadd_rn(1.0f, exp_rn(-l)));
}

// Words of shared memory route_row needs per warp (one per expert slot of its lanes).
template <typename T, int kChunks>
constexpr int kRouteRowWords = kChunks * 32 * (16 / static_cast<int>(sizeof(T)));

// Loads of logits that another block of the same grid may have written (the fused router +
// routing kernel, router_route_cuda.cuh) bypass the non-coherent read-only path: .cg reads L2.
template <bool kCoherent>
__device__ __forceinline__ uint4 load_logits_vector(const uint4* p) {
  if constexpr (kCoherent) {
    return __ldcg(p);
  } else {
    return __ldg(p);
  }
}
template <bool kCoherent, typename T>
__device__ __forceinline__ T load_logit(const T* p) {
  if constexpr (kCoherent) {
    // 16-bit logits have no __ldcg overload; read them as the raw 16 bits.
    if constexpr (sizeof(T) == 4) {
      return __ldcg(p);
    } else {
      const unsigned short bits = __ldcg(reinterpret_cast<const unsigned short*>(p));
      T v;
      memcpy(&v, &bits, sizeof(T));
      return v;
    }
  } else {
    return *p;
  }
}

// Routes one row of logits [E] T -> ids, weights [k]: the whole warp calls it (lane = its lane),
// `words` is the warp's kRouteRowWords<T, kChunks> words of shared memory. moe_route_kernel
// and the fused router + routing kernel both route through it, so their ids and weights are the
// same bits. `vector_loads`: E is a multiple of V and the row is 16-byte aligned.
template <typename T, int kChunks, bool kCoherent>
__device__ __forceinline__ void route_row(const RouteParams& p, const T* __restrict__ row_logits,
                                          const float* __restrict__ bias,
                                          int32_t* __restrict__ row_ids,
                                          float* __restrict__ row_weights, uint32_t* words,
                                          int lane, bool vector_loads) {
  constexpr int V = 16 / sizeof(T);
  constexpr int kPerLane = kChunks * V;
  const int E = p.num_experts;
  const int k = p.top_k;
  const RouteMethod method = p.method;
  const bool grouped = method == RouteMethod::kGroupedTopK;
  const bool scored =
      grouped || method == RouteMethod::kSoftmaxTopK || method == RouteMethod::kSigmoidTopK;
  const bool softmax =
      method == RouteMethod::kSoftmaxTopK || (grouped && p.score_function == RouteScore::kSoftmax);
  // The host reads the bias only for the scored methods.
  const bool has_bias = scored && p.has_score_correction_bias;
  // All groups kept (e.g. Kimi-K2's single group): the group step changes nothing.
  const bool mask_groups = grouped && p.groups_kept < p.num_groups;
  const int group_size = grouped ? E / p.num_groups : E;
  // Expert held in slot i of this lane (i is a compile-time constant in the unrolled loops).
  auto expert_of = [lane](int i) { return (i / V) * 32 * V + lane * V + i % V; };

  // Sanitized logits; slots past E hold -inf and are never selected (kRemovedKey below).
  float x[kPerLane];
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    const int e0 = expert_of(c * V);
    if (vector_loads) {
      alignas(16) T buf[V];
      *reinterpret_cast<uint4*>(buf) =
          e0 < E ? load_logits_vector<kCoherent>(reinterpret_cast<const uint4*>(row_logits + e0))
                 : make_uint4(0, 0, 0, 0);
#pragma unroll
      for (int v = 0; v < V; ++v)
        x[c * V + v] = e0 < E ? sanitize_logit(to_float(buf[v])) : neg_inf();
    } else {
#pragma unroll
      for (int v = 0; v < V; ++v) {
        x[c * V + v] = e0 + v < E
                           ? sanitize_logit(to_float(load_logit<kCoherent>(row_logits + e0 + v)))
                           : neg_inf();
      }
    }
  }

  // val: the score s for the scored methods, the sanitized logit otherwise.
  float val[kPerLane];
  if (softmax) {
    // routing.cc SoftmaxStats: p = exp(l - max) * (1 / sum), every p 0 when no logit is
    // finite. The sum is the host's: serial, in expert order (lane 0 over shared memory), so
    // that 1 / sum, and with it every score, is bit-identical.
    float max = neg_inf();
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) max = fmaxf(max, x[i]);
    max = warp_max(max);
    if (max != neg_inf()) {  // warp-uniform
      __syncwarp();          // the previous row is done with `words`
#pragma unroll
      for (int i = 0; i < kPerLane; ++i) {
        val[i] = exp_rn(x[i] - max);  // padding: exp(-inf) = 0
        if (expert_of(i) < E) words[expert_of(i)] = __float_as_uint(val[i]);
      }
      __syncwarp();
      float sum = 0.0f;
      if (lane == 0) {
        for (int e = 0; e < E; ++e) sum = __fadd_rn(sum, __uint_as_float(words[e]));
      }
      const float inv_sum = __fdiv_rn(1.0f, __shfl_sync(kFullMask, sum, 0));
#pragma unroll
      for (int i = 0; i < kPerLane; ++i) val[i] = __fmul_rn(val[i], inv_sum);
    } else {
#pragma unroll
      for (int i = 0; i < kPerLane; ++i) val[i] = 0.0f;
    }
  } else {
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) val[i] = scored ? route_sigmoid(x[i]) : x[i];
  }

  // Selection keys: c = s (+ bias) for the scored methods, the logit itself otherwise.
  uint32_t key[kPerLane];
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int e = expert_of(i);
    float c = val[i];
    if (has_bias && e < E) c = __fadd_rn(c, __ldg(bias + e));
    key[i] = e < E ? order_key(key_of(c)) : kRemovedKey;
  }

  // Grouped top-k: lane g scores group g (max, or the host's running top-2 sum, over its keys
  // in expert order, from shared memory), the best groups_kept are kept (ties -> lower group,
  // NaN compares as on the host), the experts of the others get key 0.0 as in HF.
  uint32_t kept_mask = kFullMask;
  if (mask_groups) {
    __syncwarp();  // the softmax sum is done with `words`
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      if (expert_of(i) < E) words[expert_of(i)] = key[i];
    }
    __syncwarp();
    float my_group_score = 0.0f;
    if (lane < p.num_groups) {
      uint32_t best = order_key(neg_inf()), second = best;
      for (int e = lane * group_size; e < (lane + 1) * group_size; ++e) {
        const uint32_t v = words[e];
        if (v > best) {
          second = best;
          best = v;
        } else if (v > second) {
          second = v;
        }
      }
      switch (p.group_score) {
        case RouteGroupScore::kMax:
          my_group_score = key_value(best);
          break;
        case RouteGroupScore::kSumTop2:
          my_group_score = key_value(best) + key_value(second);
          break;
      }
    }
    int better = 0;
    for (int h = 0; h < p.num_groups; ++h) {
      const float other = __shfl_sync(kFullMask, my_group_score, h);
      better += other > my_group_score || (other == my_group_score && h < lane);
    }
    kept_mask = __ballot_sync(kFullMask, lane < p.num_groups && better < p.groups_kept);
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int e = expert_of(i);
      if (e < E && !((kept_mask >> (e / group_size)) & 1u)) key[i] = order_key(0.0f);
    }
  }

  // k rounds of warp argmax; lane j keeps the j-th winner. Llama-4 selects one expert.
  const int rounds = method == RouteMethod::kLlama4Top1Sigmoid ? 1 : k;
  int32_t my_id = 0;
  float my_weight = 0.0f;
  for (int r = 0; r < rounds; ++r) {
    uint32_t best_key = kRemovedKey;
    uint32_t best_expert = 0xffffffffu;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      if (key[i] > best_key) {  // strict: the lane's lower expert wins a tie
        best_key = key[i];
        best_expert = static_cast<uint32_t>(expert_of(i));
      }
    }
    const uint32_t top = __reduce_max_sync(kFullMask, best_key);
    const int winner =
        static_cast<int>(__reduce_min_sync(kFullMask, best_key == top ? best_expert : 0xffffffffu));
    const int owner = (winner / V) & 31;
    const int slot = winner / (32 * V) * V + winner % V;
    float owner_val = 0.0f;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      if (lane == owner && i == slot) {
        owner_val = val[i];
        key[i] = kRemovedKey;
      }
    }
    const float v = __shfl_sync(kFullMask, owner_val, owner);
    float w = 0.0f;
    switch (method) {
      case RouteMethod::kSoftmaxTopK:
      case RouteMethod::kSigmoidTopK:
      case RouteMethod::kTopKSoftmax:  // the selected logit; the softmax over the k follows
        w = v;
        break;
      case RouteMethod::kGroupedTopK:
        // With a bias the unbiased score; without, the masked selection score (HF).
        w = has_bias || ((kept_mask >> (winner / group_size)) & 1u) ? v : 0.0f;
        break;
      case RouteMethod::kLlama4Top1Sigmoid:
        w = route_sigmoid(v);
        break;
    }
    if (lane == r) {
      my_id = winner;
      my_weight = w;
    }
  }

  if (method == RouteMethod::kTopKSoftmax) {
    const float top_logit = __shfl_sync(kFullMask, my_weight, 0);  // warp-uniform
    if (top_logit == neg_inf()) {
      my_weight = 0.0f;
    } else {
      const float ex = lane < k ? exp_rn(my_weight - top_logit) : 0.0f;
      my_weight = ex / warp_sum(ex);
    }
  }
  if (p.renormalize) {
    const float sum = warp_sum(lane < rounds ? my_weight : 0.0f);
    my_weight *= __fdiv_rn(1.0f, sum + kRenormEpsilon);
  }
  if (p.routed_scaling_factor != 1.0f) my_weight *= p.routed_scaling_factor;
  if (lane < rounds) {
    row_ids[lane] = my_id;
    row_weights[lane] = my_weight;
  }
}

// logits [rows, E] T -> ids, weights [rows, k]. Grid-stride over rows, one warp per row.
// `vector_loads`: E is a multiple of V and the logits are 16-byte aligned.
template <typename T, int kChunks>
__global__ void __launch_bounds__(kWarpsPerBlock * 32)
    moe_route_kernel(RouteParams p, const T* __restrict__ logits, int64_t rows,
                     const float* __restrict__ bias, int32_t* __restrict__ ids,
                     float* __restrict__ weights, bool vector_loads) {
  // Per warp, one 32-bit word per expert: the softmax exps (summed serially) or the selection
  // keys (scanned per group).
  __shared__ uint32_t row_words[kWarpsPerBlock][kRouteRowWords<T, kChunks>];
  uint32_t* words = row_words[threadIdx.x >> 5];
  const int lane = threadIdx.x & 31;

  // Launched with launch_pdl (pdl.cuh): the logits are the router GEMV's output and ids/weights
  // may still be read by the kernel before. The next kernel (the decode experts' up kernel) may
  // then become resident; it waits for this grid to complete before it reads ids or weights.
  pdl_wait();
  pdl_launch_dependents();

  for (int64_t row = blockIdx.x * static_cast<int64_t>(kWarpsPerBlock) + (threadIdx.x >> 5);
       row < rows; row += static_cast<int64_t>(gridDim.x) * kWarpsPerBlock) {
    route_row<T, kChunks, false>(p, logits + row * p.num_experts, bias, ids + row * p.top_k,
                                 weights + row * p.top_k, words, lane, vector_loads);
  }
}

template <typename T, int kChunks>
void launch_route_chunks(const RouteParams& p, const T* logits, int64_t rows, const float* bias,
                         int32_t* ids, float* weights, cudaStream_t stream) {
  constexpr int V = 16 / sizeof(T);
  const bool vector_loads = p.num_experts % V == 0 && reinterpret_cast<uintptr_t>(logits) % 16 == 0;
  launch_pdl(moe_route_kernel<T, kChunks>, dim3(grid_stride_blocks(rows, kWarpsPerBlock)),
             dim3(kWarpsPerBlock * 32), 0, stream, p, logits, rows, bias, ids, weights,
             vector_loads);
}

}  // namespace route_detail

// launch_moe_route's checks of the parameters (also the fused router + routing kernel's).
inline void check_route_params(const RouteParams& p, const float* bias) {
  MG_CHECK(p.num_experts >= 1 && p.num_experts <= kMaxRouteExperts,
           "CUDA routing takes 1..{} experts, got {}", kMaxRouteExperts, p.num_experts);
  MG_CHECK(p.top_k >= 1 && p.top_k <= kMaxRouteTopK && p.top_k <= p.num_experts,
           "CUDA routing takes top_k in [1, min({}, E = {})], got {}", kMaxRouteTopK, p.num_experts,
           p.top_k);
  MG_CHECK(p.method != RouteMethod::kLlama4Top1Sigmoid || p.top_k == 1,
           "llama4_top1_sigmoid needs top_k = 1, got {}", p.top_k);
  if (p.method == RouteMethod::kGroupedTopK) {
    MG_CHECK(
        p.num_groups >= 1 && p.num_groups <= kMaxRouteGroups && p.num_experts % p.num_groups == 0,
        "CUDA grouped top-k takes 1..{} groups dividing E = {}, got {}", kMaxRouteGroups,
        p.num_experts, p.num_groups);
    MG_CHECK(p.groups_kept >= 1 && p.groups_kept <= p.num_groups,
             "grouped top-k: groups_kept must be in [1, {}], got {}", p.num_groups, p.groups_kept);
  }
  MG_CHECK(!p.has_score_correction_bias || bias != nullptr,
           "routing needs its score-correction bias");
}

// Chunks of 32 lanes x 16 bytes a row of E experts of T takes (the kChunks template argument):
// registers per lane grow with them; E = 256 is 2 chunks in fp32, 1 in 16-bit types.
template <typename T>
int route_chunks(int num_experts) {
  constexpr int kPerChunk = 32 * (16 / static_cast<int>(sizeof(T)));
  const int chunks = (num_experts + kPerChunk - 1) / kPerChunk;
  return chunks <= 1 ? 1 : chunks <= 2 ? 2 : chunks <= 4 ? 4 : 8;
}

template <typename T>
void launch_moe_route(const RouteParams& p, const void* logits, int64_t rows, const float* bias,
                      int32_t* ids, float* weights, cudaStream_t stream) {
  check_route_params(p, bias);
  if (rows <= 0) return;
  using route_detail::launch_route_chunks;
  const T* l = static_cast<const T*>(logits);
  switch (route_chunks<T>(p.num_experts)) {
    case 1:
      return launch_route_chunks<T, 1>(p, l, rows, bias, ids, weights, stream);
    case 2:
      return launch_route_chunks<T, 2>(p, l, rows, bias, ids, weights, stream);
    case 4:
      return launch_route_chunks<T, 4>(p, l, rows, bias, ids, weights, stream);
    default:
      return launch_route_chunks<T, 8>(p, l, rows, bias, ids, weights, stream);
  }
}

}  // namespace mg::cuda
