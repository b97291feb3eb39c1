// CUDA RoPE launcher: rotates dims [rotary_offset, rotary_offset + rotary_dim) of every head by
// position * inv_freq (see rope.h); the other dims are copied.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace mg::cuda {

struct RopeArgs {
  const void* x = nullptr;             // [tokens, heads * head_dim]
  void* out = nullptr;                 // [tokens, heads * head_dim]; must not overlap x
  const int32_t* positions = nullptr;  // [tokens]
  const double* inv_freq = nullptr;    // [rotary_dim / 2], after scaling (rope_inv_freq)
  int64_t tokens = 0;
  int64_t heads = 0;
  int64_t head_dim = 0;
  int64_t rotary_dim = 0;  // even, <= head_dim - rotary_offset
  int64_t rotary_offset = 0;
  bool interleaved = false;       // pairs (2i, 2i+1) instead of (i, i + rotary_dim/2)
  double attention_factor = 1.0;  // multiplies cos and sin (YaRN)
};

// T: float, __half or __nv_bfloat16 (instantiated in rope_cuda_<dtype>.cu).
template <typename T>
void launch_rope(const RopeArgs& args, cudaStream_t stream);

}  // namespace mg::cuda
