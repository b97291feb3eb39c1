// The WNA16 layout written on the GPU (wna16_pack_on_device, wna16_pack_device_cuda.h) from codes
// and scales already there: one thread per word, per parameter pair and per FP4 scale byte
// (wna16_pack_word.h).
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

__global__ void pack_scale_bytes_kernel(Wna16ScaleByteSource source, uint8_t* bytes, int64_t count,
                                        unsigned long long* first_inexact, unsigned int* largest) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  uint32_t most = 0;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride) {
    bool exact = true;
    const uint32_t code = wna16_scale_byte(source, i, &exact);
    bytes[i] = static_cast<uint8_t>(code);
    most = max(most, code);
    if (!exact) atomicMin(first_inexact, static_cast<unsigned long long>(i));
  }
  // One atomic a warp (every lane of the grid-stride launch reaches this).
  most = __reduce_max_sync(0xFFFFFFFFu, most);
  if ((threadIdx.x & 31) == 0) atomicMax(largest, most);
}

}  // namespace

void wna16_pack_scale_bytes_on_device(const Wna16ScaleByteSource& scales, uint8_t* bytes,
                                      int64_t count, unsigned long long* first_inexact,
                                      unsigned int* largest, cudaStream_t stream) {
  if (count <= 0) return;
  constexpr int kThreads = 256;  // whole warps (the kernel's reduction)
  pack_scale_bytes_kernel<<<grid_stride_blocks(count, kThreads), kThreads, 0, stream>>>(
      scales, bytes, count, first_inexact, largest);
  MG_CUDA_CHECK_LAUNCH();
}

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
