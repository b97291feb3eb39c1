// CUDA gather / combine / scale_input kernels (included by moe_align_cuda_<dtype>.cu).
//
// Rows are moved as packs of kN elements: 16 bytes (kN = 16 / sizeof(T)) when H * sizeof(T) is a
// multiple of 16 and the pointers are 16-byte aligned, else one element. Gather and scale_input:
// one block per row (pair / token), its threads striding over the packs; combine: one block per
// (token, blockDim.x packs). All grid-stride.
#pragma once

#include <cstdint>

#include "framework/core/error.h"
#include "framework/device/cuda/cuda_check.h"
#include "framework/device/cuda/cuda_utils.cuh"
#include "ops/moe/cuda/moe_align_cuda.h"

namespace mg::cuda {
namespace align_detail {

constexpr int kMaxCombineTopK = 32;
// Up to this many tokens (decode) combine spreads each token over several blocks.
constexpr int64_t kFewCombineTokens = 64;

template <typename T, int kN>
struct alignas(sizeof(T) * kN) Pack {
  T v[kN];
};

// Threads for a row of `packs` packs: whole warps, at most 256.
inline int row_threads(int64_t packs) {
  const int64_t warps = (packs + 31) / 32;
  return static_cast<int>(32 * (warps < 1 ? 1 : (warps > 8 ? 8 : warps)));
}

inline bool aligned16(const void* p) {
  return p == nullptr || reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

// Packs of 16 bytes fit when every row starts on a 16-byte boundary.
template <typename T>
bool use_wide_packs(int64_t hidden, const void* a, const void* b, const void* c = nullptr) {
  return (hidden * static_cast<int64_t>(sizeof(T))) % 16 == 0 && aligned16(a) && aligned16(b) &&
         aligned16(c);
}

// x [M, packs] -> x_perm [num_pairs, packs]: one block per pair.
template <typename T, int kN>
__global__ void moe_gather_kernel(const Pack<T, kN>* __restrict__ x, int64_t num_pairs,
                                  int64_t top_k, int64_t packs,
                                  const int32_t* __restrict__ pair_to_row,
                                  Pack<T, kN>* __restrict__ x_perm) {
  for (int64_t p = blockIdx.x; p < num_pairs; p += gridDim.x) {
    const int row = __ldg(pair_to_row + p);
    if (row < 0) continue;  // block-uniform
    const Pack<T, kN>* src = x + (p / top_k) * packs;
    Pack<T, kN>* dst = x_perm + static_cast<int64_t>(row) * packs;
    for (int64_t i = threadIdx.x; i < packs; i += blockDim.x) dst[i] = src[i];
  }
}

// Threads j < top_k stage token t's pair j for the combine kernels: its expert-output row, the
// bias of its expert and its weight (null row and bias for a pair whose expert is not local).
template <typename T, int kN>
__device__ __forceinline__ void stage_token_pairs(
    int64_t t, int top_k, int64_t packs, const Pack<T, kN>* __restrict__ y_perm,
    const int32_t* __restrict__ pair_to_row, const int32_t* __restrict__ topk_ids,
    const float* __restrict__ topk_weights, const int32_t* __restrict__ expert_map,
    const Pack<T, kN>* __restrict__ w2_bias, const Pack<T, kN>** rows, const Pack<T, kN>** biases,
    float* row_weights) {
  if (threadIdx.x >= top_k) return;
  const int64_t pair = t * top_k + threadIdx.x;
  const int row = __ldg(pair_to_row + pair);
  rows[threadIdx.x] = row >= 0 ? y_perm + static_cast<int64_t>(row) * packs : nullptr;
  biases[threadIdx.x] =
      row >= 0 && w2_bias != nullptr
          ? w2_bias + static_cast<int64_t>(__ldg(expert_map + __ldg(topk_ids + pair))) * packs
          : nullptr;
  row_weights[threadIdx.x] = __ldg(topk_weights + pair);
}

// out[t] = sum_j w[t,j] * (y_perm[row(t,j)] + b2[local(t,j)]), fp32, j in order. One block per
// (token, blockDim.x packs), so that a decode token spreads over several SMs; one pack per
// thread. The token's k rows, weights and biases are staged in shared memory, and the rows are
// loaded kBatch at a time before they are added, so that the loads overlap.
template <typename T, int kN>
__global__ void moe_combine_kernel(const Pack<T, kN>* __restrict__ y_perm,
                                   const int32_t* __restrict__ pair_to_row,
                                   const int32_t* __restrict__ topk_ids,
                                   const float* __restrict__ topk_weights,
                                   const int32_t* __restrict__ expert_map,
                                   const Pack<T, kN>* __restrict__ w2_bias, int64_t num_tokens,
                                   int top_k, int64_t packs, Pack<T, kN>* __restrict__ out) {
  constexpr int kBatch = 8;
  __shared__ const Pack<T, kN>* rows[kMaxCombineTopK];
  __shared__ const Pack<T, kN>* biases[kMaxCombineTopK];
  __shared__ float row_weights[kMaxCombineTopK];
  const int64_t chunks = (packs + blockDim.x - 1) / blockDim.x;
  for (int64_t item = blockIdx.x; item < num_tokens * chunks; item += gridDim.x) {
    const int64_t t = item / chunks;
    const int64_t i = (item % chunks) * blockDim.x + threadIdx.x;
    __syncthreads();  // the previous item is done with the shared arrays
    stage_token_pairs(t, top_k, packs, y_perm, pair_to_row, topk_ids, topk_weights, expert_map,
                      w2_bias, rows, biases, row_weights);
    __syncthreads();
    if (i >= packs) continue;
    float acc[kN];
#pragma unroll
    for (int n = 0; n < kN; ++n) acc[n] = 0.0f;
    for (int j0 = 0; j0 < top_k; j0 += kBatch) {
      Pack<T, kN> y[kBatch], b[kBatch];
#pragma unroll
      for (int jj = 0; jj < kBatch; ++jj) {
        const int j = j0 + jj;
        if (j < top_k && rows[j] != nullptr) y[jj] = rows[j][i];
        if (j < top_k && biases[j] != nullptr) b[jj] = biases[j][i];
      }
#pragma unroll
      for (int jj = 0; jj < kBatch; ++jj) {
        const int j = j0 + jj;
        if (j >= top_k || rows[j] == nullptr) continue;  // a row of another rank adds nothing
        const float w = row_weights[j];
        if (biases[j] != nullptr) {
#pragma unroll
          for (int n = 0; n < kN; ++n) acc[n] += w * (to_float(y[jj].v[n]) + to_float(b[jj].v[n]));
        } else {
#pragma unroll
          for (int n = 0; n < kN; ++n) acc[n] += w * to_float(y[jj].v[n]);
        }
      }
    }
    Pack<T, kN> o;
#pragma unroll
    for (int n = 0; n < kN; ++n) o.v[n] = from_float<T>(acc[n]);
    out[t * packs + i] = o;
  }
}

// The same sum, one block per token with its threads striding over the packs, one row at a
// time: few registers, so many tokens keep the SMs full (on H100 with H = 7168 bf16, k = 8:
// 16384 tokens 0.74 ms, vs 2.8 ms for moe_combine_kernel, whose batches cost occupancy; for one
// token 8.7 us vs 4.1 us).
template <typename T, int kN>
__global__ void moe_combine_token_kernel(
    const Pack<T, kN>* __restrict__ y_perm, const int32_t* __restrict__ pair_to_row,
    const int32_t* __restrict__ topk_ids, const float* __restrict__ topk_weights,
    const int32_t* __restrict__ expert_map, const Pack<T, kN>* __restrict__ w2_bias,
    int64_t num_tokens, int top_k, int64_t packs, Pack<T, kN>* __restrict__ out) {
  __shared__ const Pack<T, kN>* rows[kMaxCombineTopK];
  __shared__ const Pack<T, kN>* biases[kMaxCombineTopK];
  __shared__ float row_weights[kMaxCombineTopK];
  for (int64_t t = blockIdx.x; t < num_tokens; t += gridDim.x) {
    __syncthreads();  // the previous token is done with the shared arrays
    stage_token_pairs(t, top_k, packs, y_perm, pair_to_row, topk_ids, topk_weights, expert_map,
                      w2_bias, rows, biases, row_weights);
    __syncthreads();
    for (int64_t i = threadIdx.x; i < packs; i += blockDim.x) {
      float acc[kN];
#pragma unroll
      for (int n = 0; n < kN; ++n) acc[n] = 0.0f;
      for (int j = 0; j < top_k; ++j) {
        if (rows[j] == nullptr) continue;  // a row of another rank adds nothing
        const Pack<T, kN> y = rows[j][i];
        const float w = row_weights[j];
        if (biases[j] != nullptr) {
          const Pack<T, kN> b = biases[j][i];
#pragma unroll
          for (int n = 0; n < kN; ++n) acc[n] += w * (to_float(y.v[n]) + to_float(b.v[n]));
        } else {
#pragma unroll
          for (int n = 0; n < kN; ++n) acc[n] += w * to_float(y.v[n]);
        }
      }
      Pack<T, kN> o;
#pragma unroll
      for (int n = 0; n < kN; ++n) o.v[n] = from_float<T>(acc[n]);
      out[t * packs + i] = o;
    }
  }
}

// x_out[t] = w[t,0] * x[t]; w_out[t,:] = 1. One block per token; w[t,0] is read by every thread
// before the barrier and w_out written after it, so w_out may alias w.
template <typename T, int kN>
__global__ void moe_scale_input_kernel(const Pack<T, kN>* __restrict__ x, const float* topk_weights,
                                       int64_t num_tokens, int top_k, int64_t packs,
                                       Pack<T, kN>* __restrict__ x_out, float* w_out) {
  for (int64_t t = blockIdx.x; t < num_tokens; t += gridDim.x) {
    const float w = topk_weights[t * top_k];
    __syncthreads();
    for (int j = threadIdx.x; j < top_k; j += blockDim.x) w_out[t * top_k + j] = 1.0f;
    for (int64_t i = threadIdx.x; i < packs; i += blockDim.x) {
      const Pack<T, kN> v = x[t * packs + i];
      Pack<T, kN> o;
#pragma unroll
      for (int n = 0; n < kN; ++n) o.v[n] = from_float<T>(w * to_float(v.v[n]));
      x_out[t * packs + i] = o;
    }
  }
}

template <typename T, int kN>
void gather_with(const void* x, int64_t num_pairs, int64_t top_k, int64_t hidden,
                 const MoEAlignment& a, void* x_perm, cudaStream_t stream) {
  const int64_t packs = hidden / kN;
  moe_gather_kernel<T, kN><<<grid_stride_blocks(num_pairs, 1), row_threads(packs), 0, stream>>>(
      static_cast<const Pack<T, kN>*>(x), num_pairs, top_k, packs, a.pair_to_row,
      static_cast<Pack<T, kN>*>(x_perm));
  MG_CUDA_CHECK_LAUNCH();
}

template <typename T, int kN>
void combine_with(const void* y_perm, const MoEAlignment& a, const int32_t* topk_ids,
                  const float* topk_weights, const int32_t* expert_map, const void* w2_bias,
                  int64_t num_tokens, int64_t top_k, int64_t hidden, void* out,
                  cudaStream_t stream) {
  const int64_t packs = hidden / kN;
  const int threads = row_threads(packs);
  const auto* y = static_cast<const Pack<T, kN>*>(y_perm);
  const auto* b = static_cast<const Pack<T, kN>*>(w2_bias);
  auto* o = static_cast<Pack<T, kN>*>(out);
  if (num_tokens > kFewCombineTokens) {
    moe_combine_token_kernel<T, kN><<<grid_stride_blocks(num_tokens, 1), threads, 0, stream>>>(
        y, a.pair_to_row, topk_ids, topk_weights, expert_map, b, num_tokens,
        static_cast<int>(top_k), packs, o);
    MG_CUDA_CHECK_LAUNCH();
    return;
  }
  const int64_t items = num_tokens * ((packs + threads - 1) / threads);
  moe_combine_kernel<T, kN><<<grid_stride_blocks(items, 1), threads, 0, stream>>>(
      y, a.pair_to_row, topk_ids, topk_weights, expert_map, b, num_tokens, static_cast<int>(top_k),
      packs, o);
  MG_CUDA_CHECK_LAUNCH();
}

template <typename T, int kN>
void scale_input_with(const void* x, const float* topk_weights, int64_t num_tokens, int64_t top_k,
                      int64_t hidden, void* x_out, float* w_out, cudaStream_t stream) {
  const int64_t packs = hidden / kN;
  moe_scale_input_kernel<T, kN>
      <<<grid_stride_blocks(num_tokens, 1), row_threads(packs), 0, stream>>>(
          static_cast<const Pack<T, kN>*>(x), topk_weights, num_tokens, static_cast<int>(top_k),
          packs, static_cast<Pack<T, kN>*>(x_out), w_out);
  MG_CUDA_CHECK_LAUNCH();
}

}  // namespace align_detail

template <typename T>
void launch_moe_gather(const void* x, int64_t num_tokens, int64_t top_k, int64_t hidden,
                       const MoEAlignment& a, void* x_perm, cudaStream_t stream) {
  MG_CHECK(top_k >= 1 && hidden >= 1, "moe_gather: top_k {} and hidden {} must be >= 1", top_k,
           hidden);
  const int64_t num_pairs = num_tokens * top_k;
  if (num_pairs <= 0) return;
  constexpr int kWide = 16 / sizeof(T);
  if (align_detail::use_wide_packs<T>(hidden, x, x_perm)) {
    return align_detail::gather_with<T, kWide>(x, num_pairs, top_k, hidden, a, x_perm, stream);
  }
  align_detail::gather_with<T, 1>(x, num_pairs, top_k, hidden, a, x_perm, stream);
}

template <typename T>
void launch_moe_combine(const void* y_perm, const MoEAlignment& a, const int32_t* topk_ids,
                        const float* topk_weights, const int32_t* expert_map, const void* w2_bias,
                        int64_t num_tokens, int64_t top_k, int64_t hidden, void* out,
                        cudaStream_t stream) {
  MG_CHECK(top_k >= 1 && top_k <= align_detail::kMaxCombineTopK && hidden >= 1,
           "moe_combine: top_k must be in [1, {}] and hidden >= 1, got {} and {}",
           align_detail::kMaxCombineTopK, top_k, hidden);
  if (num_tokens <= 0) return;
  constexpr int kWide = 16 / sizeof(T);
  if (align_detail::use_wide_packs<T>(hidden, y_perm, out, w2_bias)) {
    return align_detail::combine_with<T, kWide>(y_perm, a, topk_ids, topk_weights, expert_map,
                                                w2_bias, num_tokens, top_k, hidden, out, stream);
  }
  align_detail::combine_with<T, 1>(y_perm, a, topk_ids, topk_weights, expert_map, w2_bias,
                                   num_tokens, top_k, hidden, out, stream);
}

template <typename T>
void launch_moe_scale_input(const void* x, const float* topk_weights, int64_t num_tokens,
                            int64_t top_k, int64_t hidden, void* x_out, float* w_out,
                            cudaStream_t stream) {
  MG_CHECK(top_k >= 1 && hidden >= 1, "moe_scale_input: top_k {} and hidden {} must be >= 1", top_k,
           hidden);
  if (num_tokens <= 0) return;
  constexpr int kWide = 16 / sizeof(T);
  if (align_detail::use_wide_packs<T>(hidden, x, x_out)) {
    return align_detail::scale_input_with<T, kWide>(x, topk_weights, num_tokens, top_k, hidden,
                                                    x_out, w_out, stream);
  }
  align_detail::scale_input_with<T, 1>(x, topk_weights, num_tokens, top_k, hidden, x_out, w_out,
                                       stream);
}

}  // namespace mg::cuda
