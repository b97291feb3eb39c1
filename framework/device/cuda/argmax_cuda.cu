// Row argmax: one block per row, each thread scans a strided slice in ascending index order
// (strict > keeps the lowest index of equal values), then a warp-shuffle and shared-memory
// reduction with the same tie rule. Rows of whole 16-byte vectors (vocab a multiple of 4, the
// logits 16-byte aligned) take a block of 1024 threads that loads float4s, kVecLoads of them in
// flight a thread: a greedy decode step reads one row of the LM head's logits, and the 256-thread
// scalar loop, a load latency per 256 elements, took 35.7 us for Qwen3's 151936 (Nsight Compute,
// H200, session 17), longer than a whole decoder layer's attention.
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

__global__ void __launch_bounds__(kVecThreads)
    argmax_rows_vec_kernel(const float* logits, int64_t vocab, int32_t* out) {
  const auto* row =
      reinterpret_cast<const float4*>(logits + static_cast<int64_t>(blockIdx.x) * vocab);
  const int64_t vectors = vocab / 4;
  Pick p{-INFINITY, INT_MAX, INT_MAX};
  for (int64_t base = threadIdx.x; base < vectors; base += kVecThreads * kVecLoads) {
    float4 v[kVecLoads];
#pragma unroll
    for (int u = 0; u < kVecLoads; ++u) {
      const int64_t i = base + u * kVecThreads;
      v[u] = i < vectors ? __ldg(row + i) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
#pragma unroll
    for (int u = 0; u < kVecLoads; ++u) {
      const int64_t i = base + u * kVecThreads;
      if (i >= vectors) break;
      take(p, v[u].x, 4 * i);
      take(p, v[u].y, 4 * i + 1);
      take(p, v[u].z, 4 * i + 2);
      take(p, v[u].w, 4 * i + 3);
    }
  }
  p = block_reduce<kVecThreads / 32>(p);
  if (threadIdx.x == 0) {
    out[2 * blockIdx.x] = p.index;
    out[2 * blockIdx.x + 1] = p.bad == INT_MAX ? -1 : p.bad;
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
    argmax_rows_vec_kernel<<<static_cast<unsigned>(rows), kVecThreads, 0, stream>>>(logits, vocab,
                                                                                    out);
  } else {
    argmax_rows_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(logits, vocab, out);
  }
  MG_CUDA_CHECK_LAUNCH();
}

}  // namespace mg::cuda
