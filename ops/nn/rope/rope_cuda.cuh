// CUDA RoPE kernel (included by the per-dtype rope_cuda_<dtype>.cu files).
//
// One block per token. Its threads first evaluate cos/sin of every frequency once, with the angle
// position * inv_freq in fp64 as the CPU kernel does (positions up to 1e5+ and fp32 angles would
// be off by ~1e-2 rad), into shared memory; then each thread writes output elements of every head
// from that table, reading the element's pair partner.
#pragma once

#include "framework/device/cuda/cuda_check.h"
#include "framework/device/cuda/cuda_utils.cuh"
#include "ops/nn/rope/rope_cuda.h"

namespace mg::cuda {

template <typename T>
__global__ void rope_kernel(RopeArgs a) {
  extern __shared__ float cos_sin[];  // cos [half], then sin [half]
  const int64_t half = a.rotary_dim / 2;
  float* cos_f = cos_sin;
  float* sin_f = cos_sin + half;
  const int64_t t = blockIdx.x;
  const double position = a.positions[t];
  for (int64_t i = threadIdx.x; i < half; i += blockDim.x) {
    double s, c;
    sincos(position * a.inv_freq[i], &s, &c);
    cos_f[i] = static_cast<float>(c * a.attention_factor);
    sin_f[i] = static_cast<float>(s * a.attention_factor);
  }
  __syncthreads();

  const int64_t width = a.heads * a.head_dim;
  const T* x = static_cast<const T*>(a.x) + t * width;
  T* out = static_cast<T*>(a.out) + t * width;
  for (int64_t j = threadIdx.x; j < width; j += blockDim.x) {
    const int64_t rel = j % a.head_dim - a.rotary_offset;
    if (rel < 0 || rel >= a.rotary_dim) {
      out[j] = x[j];
      continue;
    }
    // Pair i is (first, second); out_first = xf c - xs s, out_second = xs c + xf s.
    int64_t i, partner;
    bool first;
    if (a.interleaved) {
      i = rel / 2;
      first = (rel & 1) == 0;
      partner = first ? j + 1 : j - 1;
    } else {
      first = rel < half;
      i = first ? rel : rel - half;
      partner = first ? j + half : j - half;
    }
    const float mine = to_float(x[j]);
    const float other = to_float(x[partner]);
    const float c = cos_f[i];
    const float s = sin_f[i];
    out[j] = from_float<T>(first ? mine * c - other * s : mine * c + other * s);
  }
}

template <typename T>
void launch_rope(const RopeArgs& args, cudaStream_t stream) {
  if (args.tokens <= 0) return;
  const int64_t width = args.heads * args.head_dim;
  const int threads = width >= 256 ? 256 : 32 * static_cast<int>((width + 31) / 32);
  const size_t shared = static_cast<size_t>(args.rotary_dim) * sizeof(float);
  rope_kernel<T><<<static_cast<unsigned>(args.tokens), threads, shared, stream>>>(args);
  MG_CUDA_CHECK_LAUNCH();
}

}  // namespace mg::cuda
