// CUDA RoPE kernel (included by the per-dtype rope_cuda_<dtype>.cu files).
//
// One block per (token, group of kRopeHeadsPerBlock heads): a decode token's 40 Llama-4 q heads
// are 10 blocks rather than one block walking every head (~8 us on the H200 for GPT-OSS's 64
// heads in one block, docs/performance.md). Each block's threads first evaluate cos/sin of every
// frequency once, with the angle position * inv_freq in fp64 as the CPU kernel does (positions up
// to 1e5+ and fp32 angles would be off by ~1e-2 rad), into shared memory, before its pdl_wait (the
// position is a step input); then each thread writes output elements of the group's heads from
// that table, reading the element's pair partner.
#pragma once

#include <algorithm>

#include "framework/core/error.h"
#include "framework/device/cuda/cuda_check.h"
#include "framework/device/cuda/cuda_utils.cuh"
#include "framework/device/cuda/pdl.cuh"
#include "ops/nn/rope/rope_cuda.h"

namespace mg::cuda {

// cos and sin of every frequency at `position` into cos_f / sin_f [rotary_dim / 2] (shared
// memory), spread over the block's threads; the caller synchronises before reading them.
__device__ __forceinline__ void rope_cos_sin(double position, const double* inv_freq, int64_t half,
                                             double attention_factor, float* cos_f, float* sin_f) {
  for (int64_t i = threadIdx.x; i < half; i += blockDim.x) {
    double s, c;
    sincos(position * inv_freq[i], &s, &c);
    cos_f[i] = static_cast<float>(c * attention_factor);
    sin_f[i] = static_cast<float>(s * attention_factor);
  }
}

// Element `rel` of a head's rotary slice (0 <= rel < rotary_dim): its pair's frequency index, the
// distance to its partner and whether it is the pair's first element.
struct RopeSlot {
  int64_t freq;
  int64_t partner_offset;
  bool first;
};

__device__ __forceinline__ RopeSlot rope_slot(int64_t rel, int64_t half, bool interleaved) {
  if (interleaved) {
    const bool first = (rel & 1) == 0;
    return {rel / 2, first ? 1 : -1, first};
  }
  const bool first = rel < half;
  return {first ? rel : rel - half, first ? half : -half, first};
}

// Pair (first, second) rotated: out_first = xf c - xs s, out_second = xs c + xf s.
__device__ __forceinline__ float rope_rotate(float mine, float other, float c, float s,
                                             bool first) {
  return first ? mine * c - other * s : mine * c + other * s;
}

// Heads per block (qk_norm_rope's number): enough blocks to spread a decode token over SMs, few
// enough that each block's cos/sin table (one fp64 sincos per frequency) serves several heads.
constexpr int64_t kRopeHeadsPerBlock = 4;

template <typename T>
__global__ void rope_kernel(RopeArgs a) {
  extern __shared__ float cos_sin[];  // cos [half], then sin [half]
  const int64_t half = a.rotary_dim / 2;
  float* cos_f = cos_sin;
  float* sin_f = cos_sin + half;
  const int64_t t = blockIdx.x;
  // The position is a step input the host copied before the step's first kernel: the cos/sin go
  // before the wait (pdl.cuh, rule 1's exception).
  rope_cos_sin(a.positions[t], a.inv_freq, half, a.attention_factor, cos_f, sin_f);
  pdl_wait();  // x comes from before (launch_pdl, pdl.cuh)
  pdl_launch_dependents();
  __syncthreads();

  const int64_t width = a.heads * a.head_dim;
  const T* x = static_cast<const T*>(a.x) + t * width;
  T* out = static_cast<T*>(a.out) + t * width;
  const int64_t group_width = kRopeHeadsPerBlock * a.head_dim;
  const int64_t begin = static_cast<int64_t>(blockIdx.y) * group_width;
  const int64_t end = begin + group_width < width ? begin + group_width : width;
  for (int64_t j = begin + threadIdx.x; j < end; j += blockDim.x) {
    const int64_t rel = j % a.head_dim - a.rotary_offset;
    if (rel < 0 || rel >= a.rotary_dim) {
      out[j] = x[j];
      continue;
    }
    const RopeSlot slot = rope_slot(rel, half, a.interleaved);
    out[j] = from_float<T>(rope_rotate(to_float(x[j]), to_float(x[j + slot.partner_offset]),
                                       cos_f[slot.freq], sin_f[slot.freq], slot.first));
  }
}

template <typename T>
void launch_rope(const RopeArgs& args, cudaStream_t stream) {
  if (args.tokens <= 0) return;
  MG_ASSERT(args.tokens <= INT32_MAX, "rope: {} token rows", args.tokens);
  const int64_t groups = (args.heads + kRopeHeadsPerBlock - 1) / kRopeHeadsPerBlock;
  MG_ASSERT(groups <= 65535, "rope: {} head groups per row", groups);
  const int64_t width = std::min(args.heads, kRopeHeadsPerBlock) * args.head_dim;
  const int threads = width >= 256 ? 256 : 32 * static_cast<int>((width + 31) / 32);
  const size_t shared = static_cast<size_t>(args.rotary_dim) * sizeof(float);
  launch_pdl(rope_kernel<T>,
             dim3(static_cast<unsigned>(args.tokens), static_cast<unsigned>(groups)), dim3(threads),
             shared, stream, args);
}

}  // namespace mg::cuda
