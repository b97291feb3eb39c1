// Random packed WNA16 weights on the GPU (launch_wna16_random_fill, wna16_experts_cuda.h): a
// splitmix64 hash of (seed, index) per 32-bit word and per group pair.
#include <algorithm>
#include <cstdint>

#include "framework/core/error.h"
#include "framework/device/cuda/cuda_check.h"
#include "ops/moe/cuda/wna16/wna16_experts_cuda.h"

namespace mg::cuda {
namespace {

__device__ __forceinline__ uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

__global__ void random_words_kernel(uint32_t* words, int64_t count, uint64_t seed) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride) {
    words[i] =
        static_cast<uint32_t>(splitmix64(seed ^ (static_cast<uint64_t>(i) * 0x100000001b3ull)));
  }
}

__global__ void random_pairs_kernel(float* params, int64_t pairs, int bits, float scale,
                                    uint64_t seed) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < pairs;
       i += stride) {
    const uint64_t h = splitmix64(seed + 0x5851F42D4C957F2Dull * static_cast<uint64_t>(i + 1));
    const float u = static_cast<float>(h >> 40) * (1.0f / 16777216.0f);  // [0, 1)
    const float s = scale * (0.5f + u);
    const float z = static_cast<float>((h >> 8) & ((1u << bits) - 1u));
    params[2 * i] = s;
    params[2 * i + 1] = -z * s;
  }
}

}  // namespace

void launch_wna16_random_fill(uint32_t* words, int64_t word_count, float* params,
                              int64_t param_count, int bits, float scale, uint64_t seed,
                              cudaStream_t stream) {
  MG_CHECK(bits == 4 || bits == 8, "WNA16 random fill: 4 or 8 bits, not {}", bits);
  MG_CHECK(param_count % 2 == 0, "WNA16 random fill: params come in pairs");
  constexpr int kThreads = 256, kMaxBlocks = 4096;
  const auto blocks = [](int64_t n) {
    return static_cast<unsigned>(
        std::max<int64_t>(1, std::min<int64_t>(kMaxBlocks, (n + kThreads - 1) / kThreads)));
  };
  if (word_count > 0) {
    random_words_kernel<<<blocks(word_count), kThreads, 0, stream>>>(words, word_count, seed);
    MG_CUDA_CHECK_LAUNCH();
  }
  if (param_count > 0) {
    random_pairs_kernel<<<blocks(param_count / 2), kThreads, 0, stream>>>(params, param_count / 2,
                                                                          bits, scale, seed);
    MG_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace mg::cuda
