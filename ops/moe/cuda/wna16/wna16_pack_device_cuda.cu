// The WNA16 layout written on the GPU (wna16_pack_on_device, wna16_pack_device_cuda.h) from codes
// and scales already there: one thread per word and per parameter pair (wna16_pack_word.h).
#include <cstdint>

#include "framework/device/cuda/cuda_check.h"
#include "framework/device/cuda/cuda_utils.cuh"
#include "ops/moe/cuda/wna16/wna16_pack_device_cuda.h"

namespace mg::cuda {
namespace {

__global__ void pack_words_kernel(Wna16PackSource source, uint32_t* words, int64_t count) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride) {
    words[i] = wna16_packed_word(source, i);
  }
}

__global__ void pack_pairs_kernel(Wna16ParamSource source, float* pairs, int64_t count) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride) {
    wna16_param_pair(source, i, pairs + 2 * i);
  }
}

}  // namespace

void wna16_pack_on_device(const Wna16PackSource& codes, const Wna16ParamSource& params,
                          uint32_t* words, int64_t word_count, float* pairs, int64_t pair_count,
                          cudaStream_t stream) {
  constexpr int kThreads = 256;
  const auto blocks = [](int64_t n) { return grid_stride_blocks(n, kThreads); };
  if (word_count > 0) {
    pack_words_kernel<<<blocks(word_count), kThreads, 0, stream>>>(codes, words, word_count);
    MG_CUDA_CHECK_LAUNCH();
  }
  if (pair_count > 0) {
    pack_pairs_kernel<<<blocks(pair_count), kThreads, 0, stream>>>(params, pairs, pair_count);
    MG_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace mg::cuda
