// CUDA embedding kernel (included by the per-dtype embedding_cuda_<dtype>.cu files).
#pragma once

#include "framework/device/cuda/cuda_check.h"
#include "framework/device/cuda/cuda_utils.cuh"
#include "framework/device/cuda/pdl.cuh"
#include "ops/nn/embedding/embedding_cuda.h"

namespace mg::cuda {

// One block per token: its threads copy the table row, scaled.
template <typename T>
__global__ void embedding_kernel(const int32_t* token_ids, const T* table, T* out, int64_t vocab,
                                 int64_t hidden, float scale) {
  const int64_t t = blockIdx.x;
  pdl_wait();  // token_ids is uploaded before; out may be read by the kernel before (pdl.cuh)
  pdl_launch_dependents();
  const int32_t id = token_ids[t];
  T* dst = out + t * hidden;
  if (id < 0 || id >= vocab) {
    const T nan = from_float<T>(__int_as_float(0x7fc00000));
    for (int64_t h = threadIdx.x; h < hidden; h += blockDim.x) dst[h] = nan;
    return;
  }
  const T* src = table + static_cast<int64_t>(id) * hidden;
  if (scale == 1.0f) {
    for (int64_t h = threadIdx.x; h < hidden; h += blockDim.x) dst[h] = src[h];
  } else {
    for (int64_t h = threadIdx.x; h < hidden; h += blockDim.x) {
      dst[h] = from_float<T>(to_float(src[h]) * scale);
    }
  }
}

template <typename T>
void launch_embedding(const EmbeddingArgs& a, cudaStream_t stream) {
  if (a.tokens <= 0) return;
  const int threads = a.hidden >= 256 ? 256 : 32 * static_cast<int>((a.hidden + 31) / 32);
  launch_pdl(embedding_kernel<T>, dim3(static_cast<unsigned>(a.tokens)), dim3(threads), 0, stream,
             a.token_ids, static_cast<const T*>(a.table), static_cast<T*>(a.out), a.vocab, a.hidden,
             a.scale);
}

}  // namespace mg::cuda
