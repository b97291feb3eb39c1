// launch_moe_align: group the token x top-k pairs by local expert (a counting sort).
//
//   small (num_pairs <= kSmallPairs, decode): one block does histogram, scan and scatter.
//   large: memset(expert_counts); moe_align_rank_kernel: per tile a shared histogram, one global
//          atomicAdd per (tile, expert) reserves the tile's range, each pair's rank within its
//          expert goes to pair_to_row; moe_align_scatter_kernel: every block scans the counts
//          (<= 1024, from L2) itself, so no separate scan launch, and turns ranks into rows.
#include "framework/core/error.h"
#include "framework/device/cuda/cuda_check.h"
#include "framework/device/cuda/cuda_utils.cuh"
#include "ops/moe/cuda/moe_align_cuda.h"

namespace mg::cuda {
namespace {

constexpr int kAlignThreads = 1024;  // = kMaxAlignLocalExperts: one expert per thread in the scan
constexpr int64_t kSmallPairs = 4096;
constexpr int kTilePairs = 4 * kAlignThreads;  // pairs per block in the rank kernel

static_assert(kAlignThreads == kMaxAlignLocalExperts);

// Local expert of a pair, -1 when not on this rank (or the id / map entry is out of range).
__device__ __forceinline__ int local_expert(const int32_t* __restrict__ topk_ids,
                                            const int32_t* __restrict__ expert_map, int64_t p,
                                            int num_experts, int num_local) {
  const int id = __ldg(topk_ids + p);
  if (id < 0 || id >= num_experts) return -1;
  const int local = __ldg(expert_map + id);
  return local < num_local ? local : -1;
}

// Exclusive prefix sum over a block of exactly kAlignThreads threads (thread e holds v);
// `warp_sums` is __shared__ int[32]. Returns the thread's prefix; *total gets the sum.
__device__ int block_exclusive_scan(int v, int* warp_sums, int* total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  int incl = v;
#pragma unroll
  for (int d = 1; d < 32; d <<= 1) {
    const int up = __shfl_up_sync(0xffffffffu, incl, d);
    if (lane >= d) incl += up;
  }
  if (lane == 31) warp_sums[warp] = incl;
  __syncthreads();
  if (warp == 0) {
    int w = warp_sums[lane];
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
      const int up = __shfl_up_sync(0xffffffffu, w, d);
      if (lane >= d) w += up;
    }
    warp_sums[lane] = w;  // inclusive over warps
  }
  __syncthreads();
  *total = warp_sums[31];
  return (warp > 0 ? warp_sums[warp - 1] : 0) + incl - v;
}

// Whole alignment in one block. pair_to_row first holds each pair's rank within its expert
// (written and read back by the same thread, so no barrier is needed for it).
__global__ void __launch_bounds__(kAlignThreads)
    moe_align_small_kernel(const int32_t* __restrict__ topk_ids, int64_t num_pairs,
                           const int32_t* __restrict__ expert_map, int num_experts, int num_local,
                           MoEAlignment out) {
  __shared__ int counts[kAlignThreads];
  __shared__ int warp_sums[32];
  const int e = threadIdx.x;
  counts[e] = 0;
  __syncthreads();
  for (int64_t p = threadIdx.x; p < num_pairs; p += kAlignThreads) {
    const int local = local_expert(topk_ids, expert_map, p, num_experts, num_local);
    out.pair_to_row[p] = local >= 0 ? atomicAdd(&counts[local], 1) : -1;
  }
  __syncthreads();
  const int count = e < num_local ? counts[e] : 0;
  int total;
  const int offset = block_exclusive_scan(count, warp_sums, &total);
  if (e < num_local) {
    out.expert_counts[e] = count;
    out.expert_offsets[e] = offset;
  }
  if (e == 0) out.expert_offsets[num_local] = total;
  counts[e] = offset;  // own slot: no other thread reads it before the barrier
  __syncthreads();
  for (int64_t p = threadIdx.x; p < num_pairs; p += kAlignThreads) {
    const int rank = out.pair_to_row[p];
    if (rank < 0) continue;
    const int row = counts[local_expert(topk_ids, expert_map, p, num_experts, num_local)] + rank;
    out.pair_to_row[p] = row;
    out.row_to_pair[row] = static_cast<int32_t>(p);
  }
}

// Tiles of kTilePairs pairs: rank of every pair within its expert (over all tiles) into
// pair_to_row, -1 for pairs of other ranks. expert_counts must be zero on entry.
__global__ void __launch_bounds__(kAlignThreads)
    moe_align_rank_kernel(const int32_t* __restrict__ topk_ids, int64_t num_pairs,
                          const int32_t* __restrict__ expert_map, int num_experts, int num_local,
                          MoEAlignment out) {
  __shared__ int tile_counts[kAlignThreads];
  constexpr int kItems = kTilePairs / kAlignThreads;
  for (int64_t tile = blockIdx.x; tile * kTilePairs < num_pairs; tile += gridDim.x) {
    tile_counts[threadIdx.x] = 0;
    __syncthreads();
    int local[kItems], rank[kItems];
#pragma unroll
    for (int i = 0; i < kItems; ++i) {
      const int64_t p = tile * kTilePairs + i * kAlignThreads + threadIdx.x;
      local[i] = p < num_pairs ? local_expert(topk_ids, expert_map, p, num_experts, num_local) : -1;
      rank[i] = local[i] >= 0 ? atomicAdd(&tile_counts[local[i]], 1) : -1;
    }
    __syncthreads();
    // Reserve the tile's range of each expert; tile_counts becomes the tile's base.
    const int e = threadIdx.x;
    if (e < num_local && tile_counts[e] > 0) {
      tile_counts[e] = atomicAdd(&out.expert_counts[e], tile_counts[e]);
    }
    __syncthreads();
#pragma unroll
    for (int i = 0; i < kItems; ++i) {
      const int64_t p = tile * kTilePairs + i * kAlignThreads + threadIdx.x;
      if (p < num_pairs) out.pair_to_row[p] = local[i] >= 0 ? tile_counts[local[i]] + rank[i] : -1;
    }
    __syncthreads();  // tile_counts is reset by the next tile
  }
}

// Ranks -> rows. Each block scans the final counts itself; block 0 writes expert_offsets.
__global__ void __launch_bounds__(kAlignThreads)
    moe_align_scatter_kernel(const int32_t* __restrict__ topk_ids, int64_t num_pairs,
                             const int32_t* __restrict__ expert_map, int num_experts, int num_local,
                             MoEAlignment out) {
  __shared__ int offsets[kAlignThreads];
  __shared__ int warp_sums[32];
  const int e = threadIdx.x;
  const int count = e < num_local ? out.expert_counts[e] : 0;
  int total;
  const int offset = block_exclusive_scan(count, warp_sums, &total);
  offsets[e] = offset;
  if (blockIdx.x == 0) {
    if (e < num_local) out.expert_offsets[e] = offset;
    if (e == 0) out.expert_offsets[num_local] = total;
  }
  __syncthreads();
  for (int64_t p = blockIdx.x * static_cast<int64_t>(kAlignThreads) + threadIdx.x; p < num_pairs;
       p += static_cast<int64_t>(gridDim.x) * kAlignThreads) {
    const int rank = out.pair_to_row[p];
    if (rank < 0) continue;
    const int row = offsets[local_expert(topk_ids, expert_map, p, num_experts, num_local)] + rank;
    out.pair_to_row[p] = row;
    out.row_to_pair[row] = static_cast<int32_t>(p);
  }
}

}  // namespace

void launch_moe_align(const int32_t* topk_ids, int64_t num_pairs, const int32_t* expert_map,
                      int64_t num_experts, int64_t num_local_experts, const MoEAlignment& out,
                      cudaStream_t stream) {
  MG_CHECK(num_local_experts >= 1 && num_local_experts <= kMaxAlignLocalExperts,
           "moe_align takes 1..{} local experts, got {}", kMaxAlignLocalExperts, num_local_experts);
  MG_CHECK(num_experts >= num_local_experts && num_experts <= (int64_t{1} << 30),
           "moe_align: {} experts for {} local ones", num_experts, num_local_experts);
  MG_CHECK(num_pairs >= 0 && num_pairs <= kMaxAlignPairs, "moe_align takes up to {} pairs, got {}",
           kMaxAlignPairs, num_pairs);
  const int E = static_cast<int>(num_experts), E_local = static_cast<int>(num_local_experts);
  if (num_pairs <= kSmallPairs) {
    // Also for num_pairs = 0: the counts and offsets are still written (all 0).
    moe_align_small_kernel<<<1, kAlignThreads, 0, stream>>>(topk_ids, num_pairs, expert_map, E,
                                                            E_local, out);
    MG_CUDA_CHECK_LAUNCH();
    return;
  }
  MG_CUDA_CHECK(cudaMemsetAsync(out.expert_counts, 0, sizeof(int32_t) * E_local, stream));
  moe_align_rank_kernel<<<grid_stride_blocks(num_pairs, kTilePairs), kAlignThreads, 0, stream>>>(
      topk_ids, num_pairs, expert_map, E, E_local, out);
  MG_CUDA_CHECK_LAUNCH();
  moe_align_scatter_kernel<<<grid_stride_blocks(num_pairs, kTilePairs), kAlignThreads, 0, stream>>>(
      topk_ids, num_pairs, expert_map, E, E_local, out);
  MG_CUDA_CHECK_LAUNCH();
}

}  // namespace mg::cuda
