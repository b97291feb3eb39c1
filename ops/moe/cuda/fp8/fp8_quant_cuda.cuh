// Dynamic per-token-group FP8 activation quantisation fused with the gather of permuted rows
// (launch_fp8_quantize, fp8_experts_cuda.h). nvcc only; included by fp8_quant_cuda_<dtype>.cu.
//
// One warp quantises one row, per 128-channel group or as one group per token: the lanes load 16
// or 8 bytes at a time, the warp (or a group's 16 lanes) takes the amax, and every step repeats
// quantize_fp8_e4m3_group (framework/core/fp8.h) as one IEEE operation in the same order: amax in
// fp32, scale = max(amax, 1e-10f) / 448 (__fdiv_rn: round to nearest whatever the division flags),
// q = e4m3(x / scale) with the hardware's round-to-nearest-even conversion. SATFINITE only matters
// above 448, where the host rounds (448, 464) to 448 as well and x / scale never goes past
// 448 * (1 + 2^-23); with a static scale it is the clamp to +-448 that static quantisation applies
// (vLLM's scaled_fp8_conversion).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "framework/core/error.h"
#include "framework/device/cuda/cuda_check.h"
#include "framework/device/cuda/cuda_utils.cuh"
#include "ops/moe/cuda/fp8/fp8_experts_cuda.h"

namespace mg::cuda::fp8 {

inline constexpr int kQuantThreads = 256;
inline constexpr float kE4M3Max = 448.0f;    // = kFp8E4M3Max (framework/core/fp8.h)
inline constexpr float kAmaxFloor = 1e-10f;  // = kFp8ActAmaxFloor

// The e4m3 code of v (round to nearest even; finite in, finite out).
__device__ __forceinline__ uint32_t e4m3_code(float v) {
  return static_cast<uint32_t>(__nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3));
}

// The four elements of 8 bytes as floats.
__device__ __forceinline__ void load4(const __nv_bfloat16* p, float (&f)[4]) {
  const uint2 v = *reinterpret_cast<const uint2*>(p);
  f[0] = __uint_as_float(v.x << 16);
  f[1] = __uint_as_float(v.x & 0xffff0000u);
  f[2] = __uint_as_float(v.y << 16);
  f[3] = __uint_as_float(v.y & 0xffff0000u);
}
__device__ __forceinline__ void load4(const __half* p, float (&f)[4]) {
  const uint2 v = *reinterpret_cast<const uint2*>(p);
  __half2 h[2];
  memcpy(&h[0], &v.x, 4);
  memcpy(&h[1], &v.y, 4);
  const float2 a = __half22float2(h[0]), b = __half22float2(h[1]);
  f[0] = a.x;
  f[1] = a.y;
  f[2] = b.x;
  f[3] = b.y;
}

// The source row of row `row`, or -1 when the row is not to be written.
__device__ __forceinline__ int64_t source_row(const Fp8QuantArgs& args, int64_t row) {
  if (row >= args.max_rows) return -1;
  if (args.num_rows != nullptr && row >= static_cast<int64_t>(*args.num_rows)) return -1;
  return args.row_to_pair == nullptr ? row
                                     : static_cast<int64_t>(args.row_to_pair[row]) / args.top_k;
}

// The codes of 4 elements as one word (e4m3(v / scale), lowest element in the lowest byte).
__device__ __forceinline__ uint32_t pack_codes(const float (&v)[4], float scale) {
  uint32_t packed = 0;
#pragma unroll
  for (int i = 0; i < 4; ++i) packed |= e4m3_code(__fdiv_rn(v[i], scale)) << (8 * i);
  return packed;
}

// The eight elements of 16 bytes as floats.
__device__ __forceinline__ void unpack8(const uint4& v, const __nv_bfloat16*, float (&f)[8]) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = __uint_as_float(w[i] << 16);
    f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
  }
}
__device__ __forceinline__ void unpack8(const uint4& v, const __half*, float (&f)[8]) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    __half2 h;
    memcpy(&h, &w[i], 4);
    const float2 a = __half22float2(h);
    f[2 * i] = a.x;
    f[2 * i + 1] = a.y;
  }
}

// Per 128 group: one warp per row. A 256-element chunk is two groups, lanes 0-15 the first and
// 16-31 the second, 8 elements (16 bytes) a lane; kGroupChunksInFlight chunks' loads are issued
// before the first amax, so a warp waits about one memory latency per 1024 elements. (One warp
// per (row, group) with 8 bytes a lane waited a latency for the row index and another for its 256
// bytes: on qwen3-30b-a3b at 4096 tokens the gather of 32768 rows x 2048 took 169 us under Nsight
// Compute, about a quarter of the copy rate.) K is a multiple of 16, so a lane's 8 elements are
// all in or all out; lanes past K hold zeros, which leave a partial group's amax alone.
inline constexpr int kGroupChunk = 2 * kFp8Group;
inline constexpr int kGroupChunksInFlight = 4;

template <typename T>
__global__ void __launch_bounds__(kQuantThreads)
    fp8_quantize_group_kernel(const Fp8QuantArgs args) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (kQuantThreads / 32) +
                      static_cast<int64_t>(threadIdx.x / 32);
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int64_t src = source_row(args, row);
  if (src < 0) return;
  const T* x = static_cast<const T*>(args.x) + src * args.k;
  uint8_t* xq = args.xq + row * args.k;
  float* xs = args.xs + row * fp8_groups(args.k);
  for (int64_t c0 = 0; c0 < args.k; c0 += kGroupChunk * kGroupChunksInFlight) {
    uint4 raw[kGroupChunksInFlight];
#pragma unroll
    for (int u = 0; u < kGroupChunksInFlight; ++u) {
      const int64_t kc = c0 + u * kGroupChunk + lane * 8;
      raw[u] = kc < args.k ? *reinterpret_cast<const uint4*>(x + kc) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < kGroupChunksInFlight; ++u) {
      if (c0 + u * kGroupChunk >= args.k) break;  // the same for the whole warp
      const int64_t kc = c0 + u * kGroupChunk + lane * 8;
      float v[8];
      unpack8(raw[u], static_cast<const T*>(nullptr), v);
      float amax = 0.0f;
#pragma unroll
      for (int i = 0; i < 8; ++i) amax = fmaxf(amax, fabsf(v[i]));
#pragma unroll
      for (int d = 8; d > 0; d >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, d));
      const float scale = __fdiv_rn(fmaxf(amax, kAmaxFloor), kE4M3Max);
      if (kc < args.k) {
        const float lo[4] = {v[0], v[1], v[2], v[3]}, hi[4] = {v[4], v[5], v[6], v[7]};
        *reinterpret_cast<uint2*>(xq + kc) =
            make_uint2(pack_codes(lo, scale), pack_codes(hi, scale));
        if ((lane & 15) == 0) xs[kc / kFp8Group] = scale;
      }
    }
  }
}

// Per token (the whole row one group): one warp per row reads it twice, for the amax and for the
// codes (max is exact in any order, so the scale is the host's).
template <typename T>
__global__ void __launch_bounds__(kQuantThreads)
    fp8_quantize_token_kernel(const Fp8QuantArgs args) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (kQuantThreads / 32) +
                      static_cast<int64_t>(threadIdx.x / 32);
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int64_t src = source_row(args, row);
  if (src < 0) return;
  const T* x = static_cast<const T*>(args.x) + src * args.k;
  float scale;
  if (args.static_scale != nullptr) {
    scale = *args.static_scale;
  } else {
    float amax = 0.0f;
    for (int64_t kc = lane * 4; kc < args.k; kc += 128) {
      float v[4];
      load4(x + kc, v);
#pragma unroll
      for (int i = 0; i < 4; ++i) amax = fmaxf(amax, fabsf(v[i]));
    }
    amax = warp_max(amax);
    scale = __fdiv_rn(fmaxf(amax, kAmaxFloor), kE4M3Max);
  }
  for (int64_t kc = lane * 4; kc < args.k; kc += 128) {
    float v[4];
    load4(x + kc, v);
    *reinterpret_cast<uint32_t*>(args.xq + row * args.k + kc) = pack_codes(v, scale);
  }
  if (lane == 0) args.xs[row] = scale;
}

}  // namespace mg::cuda::fp8

namespace mg::cuda {

template <typename T>
void launch_fp8_quantize(const Fp8QuantArgs& args, cudaStream_t stream) {
  MG_CHECK(args.k > 0 && args.k % 16 == 0, "FP8 quantize: K {} must be a positive multiple of 16",
           args.k);
  MG_CHECK(args.top_k >= 1, "FP8 quantize: top_k {} must be at least 1", args.top_k);
  MG_CHECK(args.static_scale == nullptr || args.per_token,
           "FP8 quantize: a static scale needs the per-token scale layout (per_token)");
  if (args.max_rows <= 0) return;
  MG_CHECK(reinterpret_cast<uintptr_t>(args.x) % 16 == 0,
           "FP8 quantize: the activations must be 16-byte aligned");
  // Both kernels take a row a warp.
  constexpr int64_t kWarps = fp8::kQuantThreads / 32;
  const int64_t blocks = (args.max_rows + kWarps - 1) / kWarps;
  MG_CHECK(blocks <= INT32_MAX, "FP8 quantize: {} rows exceed the grid", args.max_rows);
  if (args.per_token) {
    fp8::fp8_quantize_token_kernel<T>
        <<<static_cast<unsigned>(blocks), fp8::kQuantThreads, 0, stream>>>(args);
  } else {
    fp8::fp8_quantize_group_kernel<T>
        <<<static_cast<unsigned>(blocks), fp8::kQuantThreads, 0, stream>>>(args);
  }
  MG_CUDA_CHECK_LAUNCH();
}

}  // namespace mg::cuda
