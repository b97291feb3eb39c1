#include "framework/device/cuda/cuda_check.h"
#include "framework/device/cuda/cuda_utils.cuh"
#include "framework/device/cuda/dtype_dispatch.h"
#include "framework/device/cuda/random_fill_cuda.h"

namespace mg::cuda {

namespace {

// splitmix64: a full-avalanche 64-bit mix; one call per element.
__device__ __forceinline__ uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

template <typename T>
__global__ void fill_uniform_kernel(T* data, int64_t n, uint64_t seed, float scale) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const uint64_t bits = mix64(seed ^ mix64(static_cast<uint64_t>(i)));
    const float u = static_cast<float>(bits >> 40) * (1.0f / 16777216.0f);  // [0, 1)
    data[i] = from_float<T>((2.0f * u - 1.0f) * scale);
  }
}

}  // namespace

void fill_uniform(void* data, int64_t n, DType dtype, uint64_t seed, float scale,
                  cudaStream_t stream) {
  if (n <= 0) return;
  constexpr int kThreads = 256;
  dispatch_float_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    fill_uniform_kernel<T><<<grid_stride_blocks(n, kThreads), kThreads, 0, stream>>>(
        static_cast<T*>(data), n, seed, scale);
  });
  MG_CUDA_CHECK_LAUNCH();
}

}  // namespace mg::cuda
