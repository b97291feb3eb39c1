// The WNA16 layout (wna16_experts_cuda.h, section 1) written on the GPU from codes and scales
// already there: cuda_wna16 and cuda_fp4 repack codes made or loaded on the GPU with it, with no
// host round trip. Host-only header (the kernels are in wna16_pack_device_cuda.cu).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "ops/moe/cuda/wna16/wna16_pack_word.h"

namespace mg::cuda {

// The `word_count` words and `pair_count` parameter pairs of wna16_layout / wna16_layout_e2m1's
// result (wna16_pack_word.h), one thread each. Neither syncs nor allocates. Unlike wna16_pack it
// checks no code or zero point (canonical 4- and 8-bit codes are in range by construction).
void wna16_pack_on_device(const Wna16PackSource& codes, const Wna16ParamSource& params,
                          uint32_t* words, int64_t word_count, float* pairs, int64_t pair_count,
                          cudaStream_t stream);

// The `count` FP4 scale bytes of wna16_layout_e2m1's result (wna16_scale_byte), one thread each;
// `*first_inexact` (device, set to `count` by the caller) is lowered to the index of the first
// byte whose scale has no code, and `*largest` (device, set to 0 by the caller) raised to the
// largest byte (MXFP4: what Wna16Weights::e8m0_shift is made from). Neither syncs nor allocates.
void wna16_pack_scale_bytes_on_device(const Wna16ScaleByteSource& scales, uint8_t* bytes,
                                      int64_t count, unsigned long long* first_inexact,
                                      unsigned int* largest, cudaStream_t stream);

}  // namespace mg::cuda
