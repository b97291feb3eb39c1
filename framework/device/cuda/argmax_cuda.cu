// Row argmax: each thread scans a strided slice in ascending index order (strict > keeps the
// lowest index of equal values), then a warp-shuffle and shared-memory reduction with the same tie
// rule. Rows of whole 16-byte vectors (vocab a multiple of 4, the logits 16-byte aligned) are cut
// into kClusterBlocks parts, one 1024-thread block each, loading float4s with kVecLoads in flight
// a thread; the blocks of a row are one thread block cluster (sm_90), and the first reduces the
// others' picks through distributed shared memory. A greedy decode step reads one row of the LM
// head's logits: the 256-thread scalar loop (a load latency per 256 elements) took 35.7 us for
// Qwen3's 151936 (Nsight Compute, H200, session 17), one 1024-thread block ~15 us (session 20),
// longer than a decoder layer's attention. Other rows keep one 256-thread block.
#include <cooperative_groups.h>

#include <climits>

#include "framework/device/cuda/argmax_cuda.h"
#include "framework/device/cuda/cuda_check.h"

namespace mg::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

struct Pick {
  float value;
  int32_t index;  // INT_MAX: none yet
  int32_t bad;    // first non-finite index, INT_MAX: none
};

__device__ __forceinline__ Pick better(Pick a, Pick b) {
  Pick r;
  const bool take_b = b.value > a.value || (b.value == a.value && b.index < a.index);
  r.value = take_b ? b.value : a.value;
  r.index = take_b ? b.index : a.index;
  r.bad = min(a.bad, b.bad);
  return r;
}

__device__ __forceinline__ Pick warp_reduce(Pick p) {
  for (int offset = 16; offset > 0; offset /= 2) {
    Pick other;
    other.value = __shfl_down_sync(0xffffffffu, p.value, offset);
    other.index = __shfl_down_sync(0xffffffffu, p.index, offset);
    other.bad = __shfl_down_sync(0xffffffffu, p.bad, offset);
    p = better(p, other);
  }
  return p;
}

// Folds element i of value v into p (elements come in ascending index order).
__device__ __forceinline__ void take(Pick& p, float v, int64_t i) {
  if (!isfinite(v)) {
    if (p.bad == INT_MAX) p.bad = static_cast<int32_t>(i);
    return;
  }
  if (p.index == INT_MAX || v > p.value) {
    p.value = v;
    p.index = static_cast<int32_t>(i);
  }
}

// The block's picks reduced to one (the result is thread 0's; kBlockWarps <= 32).
template <int kBlockWarps>
__device__ __forceinline__ Pick block_reduce(Pick p) {
  p = warp_reduce(p);
  __shared__ Pick warps[kBlockWarps];
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  if (lane == 0) warps[warp] = p;
  __syncthreads();
  p = lane < kBlockWarps ? warps[lane] : Pick{-INFINITY, INT_MAX, INT_MAX};
  return warp_reduce(p);
}

constexpr int kVecThreads = 1024;
constexpr int kVecLoads = 4;
constexpr int kClusterBlocks = 8;  // the portable cluster size
constexpr unsigned kMaxGridY = 65535;

__global__ void __cluster_dims__(kClusterBlocks, 1, 1) __launch_bounds__(kVecThreads)
    argmax_rows_vec_kernel(const float* logits, int64_t rows, int64_t vocab, int32_t* out) {
  namespace cg = cooperative_groups;
  const cg::cluster_group cluster = cg::this_cluster();
  const int part = static_cast<int>(cluster.block_rank());
  const int64_t vectors = vocab / 4;
  const int64_t per_part = (vectors + kClusterBlocks - 1) / kClusterBlocks;
  const int64_t begin = part * per_part;
  const int64_t end = begin + per_part < vectors ? begin + per_part : vectors;
  __shared__ Pick part_pick;
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {  // the same r for the whole cluster
    const auto* row = reinterpret_cast<const float4*>(logits + r * vocab);
    Pick p{-INFINITY, INT_MAX, INT_MAX};
    for (int64_t base = begin + threadIdx.x; base < end; base += kVecThreads * kVecLoads) {
      float4 v[kVecLoads];
#pragma unroll
      for (int u = 0; u < kVecLoads; ++u) {
        const int64_t i = base + u * kVecThreads;
        v[u] = i < end ? __ldg(row + i) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      }
#pragma unroll
      for (int u = 0; u < kVecLoads; ++u) {
        const int64_t i = base + u * kVecThreads;
        if (i >= end) break;
        take(p, v[u].x, 4 * i);
        take(p, v[u].y, 4 * i + 1);
        take(p, v[u].z, 4 * i + 2);
        take(p, v[u].w, 4 * i + 3);
      }
    }
    p = block_reduce<kVecThreads / 32>(p);
    if (threadIdx.x == 0) part_pick = p;
    cluster.sync();  // every part's pick is in its shared memory
    if (part == 0 && threadIdx.x < 32) {
      Pick q = threadIdx.x < kClusterBlocks
                   ? *cluster.map_shared_rank(&part_pick, static_cast<unsigned>(threadIdx.x))
                   : Pick{-INFINITY, INT_MAX, INT_MAX};
      q = warp_reduce(q);
      if (threadIdx.x == 0) {
        out[2 * r] = q.index;
        out[2 * r + 1] = q.bad == INT_MAX ? -1 : q.bad;
      }
    }
    cluster.sync();  // part 0 has read every part_pick before any is written again or exits
  }
}

__global__ void argmax_rows_kernel(const float* logits, int64_t vocab, int32_t* out) {
  const float* row = logits + static_cast<int64_t>(blockIdx.x) * vocab;
  Pick p{-INFINITY, INT_MAX, INT_MAX};
  for (int64_t i = threadIdx.x; i < vocab; i += kThreads) take(p, row[i], i);
  p = block_reduce<kWarps>(p);
  if (threadIdx.x == 0) {
    out[2 * blockIdx.x] = p.index;
    out[2 * blockIdx.x + 1] = p.bad == INT_MAX ? -1 : p.bad;
  }
}

}  // namespace

void argmax_rows_cuda(const float* logits, int64_t rows, int64_t vocab, int32_t* out,
                      cudaStream_t stream) {
  if (rows <= 0) return;
  MG_ASSERT(vocab >= 1 && vocab < INT_MAX, "argmax_rows_cuda: vocab {}", vocab);
  MG_ASSERT(rows < INT_MAX, "argmax_rows_cuda: {} rows", rows);
  if (vocab % 4 == 0 && reinterpret_cast<uintptr_t>(logits) % 16 == 0) {
    const dim3 grid(kClusterBlocks, static_cast<unsigned>(rows < kMaxGridY ? rows : kMaxGridY));
    argmax_rows_vec_kernel<<<grid, kVecThreads, 0, stream>>>(logits, rows, vocab, out);
  } else {
    argmax_rows_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(logits, vocab, out);
  }
  MG_CUDA_CHECK_LAUNCH();
}

}  // namespace mg::cuda
