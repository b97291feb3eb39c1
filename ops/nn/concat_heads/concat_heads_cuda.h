// CUDA concat_heads launcher: output head h = [a head h, b head h] or, with one b head,
// [a head h, b head 0] (see concat_heads.h). A copy of bits, so equal to the CPU in every dtype.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace mg::cuda {

struct ConcatHeadsArgs {
  const void* a = nullptr;  // [tokens, heads * a_dim]
  const void* b = nullptr;  // [tokens, b_heads * b_dim]
  void* out = nullptr;      // [tokens, heads * (a_dim + b_dim)]; must not overlap a or b
  int64_t tokens = 0;
  int64_t heads = 0;
  int64_t a_dim = 0;
  int64_t b_heads = 0;  // 1 (one b head shared by every head: MLA's rope key) or heads
  int64_t b_dim = 0;
};

// T: float, __half or __nv_bfloat16 (instantiated in concat_heads_cuda_<dtype>.cu); only its size
// matters.
template <typename T>
void launch_concat_heads(const ConcatHeadsArgs& args, cudaStream_t stream);

}  // namespace mg::cuda
