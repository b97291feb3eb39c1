// CUDA q/k norm + RoPE launcher (see qk_norm_rope.h): each head of q and of k normalised (where
// its norm is on), y = x * rsqrt(mean over the head of x² + eps) * w, rounded to T, then rotated
// by position * inv_freq; fp32 math, fp64 angles.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace mg::cuda {

struct QkNormRopeArgs {
  const void* q = nullptr;             // [tokens, q_heads * head_dim]
  const void* k = nullptr;             // [tokens, k_heads * head_dim]
  const void* q_weight = nullptr;      // [head_dim] or null (no weight)
  const void* k_weight = nullptr;      // [head_dim] or null
  void* q_out = nullptr;               // like q; overlaps none of the inputs
  void* k_out = nullptr;               // like k; overlaps none of the inputs
  const int32_t* positions = nullptr;  // [tokens]
  const double* inv_freq = nullptr;    // [rotary_dim / 2], after scaling (rope_inv_freq)
  int64_t tokens = 0;
  int64_t q_heads = 0;
  int64_t k_heads = 0;
  int64_t head_dim = 0;  // <= kQkNormRopeMaxHeadDim (1024)
  int64_t rotary_dim = 0;
  int64_t rotary_offset = 0;
  bool interleaved = false;
  double attention_factor = 1.0;
  bool q_norm = true;  // false: q's heads are rotated as they are (no norm, no weight)
  bool k_norm = true;
  float q_eps = 1e-6f;
  float k_eps = 1e-6f;
  // Heads per block (the kernel's grid is tokens x ceil((q_heads + k_heads) / heads_per_block));
  // 0: kQkNormRopeHeadsPerBlock. Any value gives the same bytes (tests force every head, the
  // one-block-per-token layout, and compare).
  int64_t heads_per_block = 0;
};

// T: float, __half or __nv_bfloat16 (instantiated in qk_norm_rope_cuda_<dtype>.cu).
template <typename T>
void launch_qk_norm_rope(const QkNormRopeArgs& args, cudaStream_t stream);

}  // namespace mg::cuda
