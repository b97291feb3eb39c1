// Row argmax: one block per row, each thread scans a strided slice in ascending index order
// (strict > keeps the lowest index of equal values), then a warp-shuffle and shared-memory
// reduction with the same tie rule.
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

__global__ void argmax_rows_kernel(const float* logits, int64_t vocab, int32_t* out) {
  const float* row = logits + static_cast<int64_t>(blockIdx.x) * vocab;
  Pick p{-INFINITY, INT_MAX, INT_MAX};
  for (int64_t i = threadIdx.x; i < vocab; i += kThreads) {
    const float v = row[i];
    if (!isfinite(v)) {
      if (p.bad == INT_MAX) p.bad = static_cast<int32_t>(i);
      continue;
    }
    if (p.index == INT_MAX || v > p.value) {
      p.value = v;
      p.index = static_cast<int32_t>(i);
    }
  }
  p = warp_reduce(p);
  __shared__ Pick warps[kWarps];
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  if (lane == 0) warps[warp] = p;
  __syncthreads();
  if (warp == 0) {
    p = lane < kWarps ? warps[lane] : Pick{-INFINITY, INT_MAX, INT_MAX};
    p = warp_reduce(p);
    if (lane == 0) {
      out[2 * blockIdx.x] = p.index;
      out[2 * blockIdx.x + 1] = p.bad == INT_MAX ? -1 : p.bad;
    }
  }
}

}  // namespace

void argmax_rows_cuda(const float* logits, int64_t rows, int64_t vocab, int32_t* out,
                      cudaStream_t stream) {
  if (rows <= 0) return;
  MG_ASSERT(vocab >= 1 && vocab < INT_MAX, "argmax_rows_cuda: vocab {}", vocab);
  MG_ASSERT(rows < INT_MAX, "argmax_rows_cuda: {} rows", rows);
  argmax_rows_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(logits, vocab, out);
  MG_CUDA_CHECK_LAUNCH();
}

}  // namespace mg::cuda
