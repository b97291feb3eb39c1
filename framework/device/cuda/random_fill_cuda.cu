#include "framework/device/cuda/cuda_check.h"
#include "framework/device/cuda/cuda_utils.cuh"
#include "framework/device/cuda/dtype_dispatch.h"
#include "framework/device/cuda/random_fill_cuda.h"
#include "framework/device/random_uniform.h"

namespace mg::cuda {

namespace {

template <typename T>
__global__ void fill_uniform_kernel(T* data, int64_t n, uint64_t seed, float center, float scale) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    data[i] = from_float<T>(uniform_at(seed, static_cast<uint64_t>(i), center, scale));
  }
}

__global__ void random_bytes_kernel(uint8_t* bytes, int64_t n, uint64_t seed) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float v = uniform_at(seed, static_cast<uint64_t>(i), 128.0f, 128.0f);
    bytes[i] = static_cast<uint8_t>(fminf(fmaxf(floorf(v), 0.0f), 255.0f));
  }
}

__global__ void random_scales_kernel(float* scale, int64_t n, uint64_t seed, float base,
                                     Fp4ScaleGrid grid, float global) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float v = uniform_at(seed, static_cast<uint64_t>(i), 1.0f, 0.5f);
    // No contraction: the host's product; the rounding is exact operations only.
    scale[i] = round_fp4_scale(__fmul_rn(v, base), grid, global);
  }
}

// One thread per (row, group): the group's range, then its codes (quantize_int_rows' arithmetic,
// IEEE division and round-to-nearest-even as on the host).
__global__ void random_int_codes_kernel(uint8_t* codes, float* scale, float* zero, int64_t rows,
                                        int64_t C, int64_t gc, int64_t G, int64_t row_bytes,
                                        int bits, bool is_signed, uint64_t seed, float range) {
  const int32_t qmax = is_signed ? (1 << (bits - 1)) - 1 : (1 << bits) - 1;
  const int32_t qmin = is_signed ? -(1 << (bits - 1)) : 0;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < rows * G;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / G, g = i % G;
    const int64_t c0 = g * gc, c1 = c0 + gc < C ? c0 + gc : C;
    const uint64_t base = static_cast<uint64_t>(r * C);
    float lo = 0.0f, hi = 0.0f, amax = 0.0f;
    for (int64_t c = c0; c < c1; ++c) {
      const float x = uniform_at(seed, base + static_cast<uint64_t>(c), 0.0f, range);
      lo = fminf(lo, x);
      hi = fmaxf(hi, x);
      amax = fmaxf(amax, fabsf(x));
    }
    float s = is_signed ? __fdiv_rn(amax, static_cast<float>(qmax))
                        : __fdiv_rn(__fsub_rn(hi, lo), static_cast<float>(qmax));
    if (!(s > 0.0f)) s = 1.0f;
    float z = 0.0f;
    if (!is_signed) {
      z = fminf(fmaxf(rintf(__fdiv_rn(-lo, s)), 0.0f), static_cast<float>(qmax));
      zero[i] = z;
    }
    scale[i] = s;
    uint8_t* row = codes + r * row_bytes;
    const auto code_of = [&](int64_t c) {
      const float x = uniform_at(seed, base + static_cast<uint64_t>(c), 0.0f, range);
      const float v = __fadd_rn(rintf(__fdiv_rn(x, s)), z);
      return static_cast<int32_t>(
          fminf(fmaxf(v, static_cast<float>(qmin)), static_cast<float>(qmax)));
    };
    if (bits == 4) {
      // Groups start at even columns (multiples of 32, or the row): whole bytes.
      for (int64_t c = c0; c < c1; c += 2) {
        const int32_t low = code_of(c) & 0xF;
        const int32_t high = c + 1 < c1 ? code_of(c + 1) & 0xF : 0;
        row[c >> 1] = static_cast<uint8_t>(low | (high << 4));
      }
    } else {
      for (int64_t c = c0; c < c1; ++c) row[c] = static_cast<uint8_t>(code_of(c) & 0xFF);
    }
  }
}

}  // namespace

void fill_random_bytes(uint8_t* bytes, int64_t n, uint64_t seed, cudaStream_t stream) {
  if (n <= 0) return;
  constexpr int kThreads = 256;
  random_bytes_kernel<<<grid_stride_blocks(n, kThreads), kThreads, 0, stream>>>(bytes, n, seed);
  MG_CUDA_CHECK_LAUNCH();
}

void fill_random_scales(float* scale, int64_t n, uint64_t seed, float base, Fp4ScaleGrid grid,
                        float global, cudaStream_t stream) {
  if (n <= 0) return;
  constexpr int kThreads = 256;
  random_scales_kernel<<<grid_stride_blocks(n, kThreads), kThreads, 0, stream>>>(
      scale, n, seed, base, grid, global);
  MG_CUDA_CHECK_LAUNCH();
}

void fill_random_int_codes(uint8_t* codes, float* scale, float* zero, int64_t rows, int64_t C,
                           int64_t group_cols, int bits, bool is_signed, uint64_t seed, float range,
                           cudaStream_t stream) {
  const int64_t gc = group_cols < 0 ? C : group_cols;
  const int64_t G = (C + gc - 1) / gc;
  const int64_t n = rows * G;
  if (n <= 0) return;
  const int64_t row_bytes = bits == 4 ? (C + 1) / 2 : C;
  constexpr int kThreads = 128;
  random_int_codes_kernel<<<grid_stride_blocks(n, kThreads), kThreads, 0, stream>>>(
      codes, scale, zero, rows, C, gc, G, row_bytes, bits, is_signed, seed, range);
  MG_CUDA_CHECK_LAUNCH();
}

void fill_uniform(void* data, int64_t n, DType dtype, uint64_t seed, float center, float scale,
                  cudaStream_t stream) {
  if (n <= 0) return;
  constexpr int kThreads = 256;
  dispatch_float_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    fill_uniform_kernel<T><<<grid_stride_blocks(n, kThreads), kThreads, 0, stream>>>(
        static_cast<T*>(data), n, seed, center, scale);
  });
  MG_CUDA_CHECK_LAUNCH();
}

}  // namespace mg::cuda
