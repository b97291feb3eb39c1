#include "framework/device/cuda/cuda_check.h"
#include "framework/device/cuda/cuda_utils.cuh"
#include "framework/device/cuda/dtype_dispatch.h"
#include "framework/device/cuda/random_fill_cuda.h"
#include "framework/device/random_uniform.h"

namespace mg::cuda {

namespace {

template <typename T>
__global__ void fill_uniform_kernel(T* data, int64_t n, uint64_t seed, float center, float scale) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    data[i] = from_float<T>(uniform_at(seed, static_cast<uint64_t>(i), center, scale));
  }
}

}  // namespace

void fill_uniform(void* data, int64_t n, DType dtype, uint64_t seed, float center, float scale,
                  cudaStream_t stream) {
  if (n <= 0) return;
  constexpr int kThreads = 256;
  dispatch_float_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    fill_uniform_kernel<T><<<grid_stride_blocks(n, kThreads), kThreads, 0, stream>>>(
        static_cast<T*>(data), n, seed, center, scale);
  });
  MG_CUDA_CHECK_LAUNCH();
}

}  // namespace mg::cuda
