// The kernels of fp8_cublaslt_prep_cuda.h.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "framework/core/error.h"
#include "framework/device/cuda/cuda_check.h"
#include "framework/device/cuda/cuda_utils.cuh"
#include "ops/moe/cuda/fp8/fp8_cublaslt_prep_cuda.h"
#include "ops/moe/cuda/moe_activation_cuda.cuh"

namespace mg::cuda {
namespace {

constexpr int kThreads = 256;

// The expert whose rows hold row r (offsets ascending): the last e with offsets[e] <= r.
__device__ __forceinline__ int expert_of_row(const int32_t* offsets, int num_experts, int r) {
  int lo = 0, hi = num_experts - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (__ldg(offsets + mid) <= r) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

__global__ void vec128_scales_kernel(const float* __restrict__ xs, int cols,
                                     const int32_t* __restrict__ offsets, int num_experts,
                                     int max_rows, int k_blocks, float* __restrict__ out) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<int64_t>(max_rows) * k_blocks) return;
  const int r = static_cast<int>(i / k_blocks), kb = static_cast<int>(i % k_blocks);
  if (r < __ldg(offsets) || r >= __ldg(offsets + num_experts)) return;
  const int e = expert_of_row(offsets, num_experts, r);
  const int begin = __ldg(offsets + e), rows = __ldg(offsets + e + 1) - begin;
  const int64_t base = fp8_vec128_scale_offset(k_blocks, begin, e);
  out[base + static_cast<int64_t>(kb) * fp8_lt_rows(rows) + (r - begin)] =
      xs[static_cast<int64_t>(r) * cols + (cols == 1 ? 0 : kb)];
}

__global__ void vec128_scales_dense_kernel(const float* __restrict__ xs, int cols, int rows, int ld,
                                           int k_blocks, float* __restrict__ out) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<int64_t>(rows) * k_blocks) return;
  const int r = static_cast<int>(i / k_blocks), kb = static_cast<int>(i % k_blocks);
  out[static_cast<int64_t>(kb) * ld + r] =
      xs[static_cast<int64_t>(r) * cols + (cols == 1 ? 0 : kb)];
}

template <typename T>
__global__ void rows_bias_act_kernel(const T* in, int n_in, T* out, int n_out,
                                     const int32_t* __restrict__ offsets, int num_experts,
                                     int max_rows, const float* __restrict__ bias, bool activation,
                                     bool gated, MoEActParams act) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<int64_t>(max_rows) * n_out) return;
  const int r = static_cast<int>(i / n_out), c = static_cast<int>(i % n_out);
  if (r < __ldg(offsets) || r >= __ldg(offsets + num_experts)) return;
  const float* b = bias == nullptr
                       ? nullptr
                       : bias + static_cast<int64_t>(expert_of_row(offsets, num_experts, r)) * n_in;
  const T* row = in + static_cast<int64_t>(r) * n_in;
  float g = to_float(row[c]) + (b ? b[c] : 0.0f);
  if (!activation) {
    out[static_cast<int64_t>(r) * n_out + c] = from_float<T>(g);
    return;
  }
  const float u = gated ? to_float(row[n_out + c]) + (b ? b[n_out + c] : 0.0f) : 0.0f;
  out[static_cast<int64_t>(r) * n_out + c] = from_float<T>(moe_activation(act, g, u));
}

unsigned blocks_for(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  MG_CHECK(blocks <= INT32_MAX, "FP8 cuBLASLt prep: {} elements exceed the grid", n);
  return static_cast<unsigned>(blocks);
}

}  // namespace

void launch_fp8_vec128_scales(const float* xs, int64_t cols, const int32_t* offsets,
                              int64_t num_experts, int64_t max_rows, int64_t k_blocks, float* out,
                              cudaStream_t stream) {
  if (max_rows <= 0 || num_experts <= 0 || k_blocks <= 0) return;
  MG_CHECK(max_rows <= INT32_MAX && k_blocks <= INT32_MAX && num_experts <= INT32_MAX,
           "FP8 cuBLASLt scales: {} rows x {} blocks exceed 32-bit indices", max_rows, k_blocks);
  vec128_scales_kernel<<<blocks_for(max_rows * k_blocks), kThreads, 0, stream>>>(
      xs, static_cast<int>(cols), offsets, static_cast<int>(num_experts),
      static_cast<int>(max_rows), static_cast<int>(k_blocks), out);
  MG_CUDA_CHECK_LAUNCH();
}

void launch_fp8_vec128_scales_dense(const float* xs, int64_t cols, int64_t rows, int64_t ld,
                                    int64_t k_blocks, float* out, cudaStream_t stream) {
  if (rows <= 0 || k_blocks <= 0) return;
  MG_ASSERT(ld >= rows, "FP8 cuBLASLt scales: leading dimension {} below {} rows", ld, rows);
  MG_CHECK(ld <= INT32_MAX && k_blocks <= INT32_MAX && cols <= INT32_MAX,
           "FP8 cuBLASLt scales: {} rows x {} blocks exceed 32-bit indices", rows, k_blocks);
  vec128_scales_dense_kernel<<<blocks_for(rows * k_blocks), kThreads, 0, stream>>>(
      xs, static_cast<int>(cols), static_cast<int>(rows), static_cast<int>(ld),
      static_cast<int>(k_blocks), out);
  MG_CUDA_CHECK_LAUNCH();
}

template <typename T>
void launch_fp8_rows_bias_act(const void* in, int64_t n_in, void* out, int64_t n_out,
                              const int32_t* offsets, int64_t num_experts, int64_t max_rows,
                              const float* bias, bool activation, bool gated,
                              const MoEActParams& act, cudaStream_t stream) {
  if (max_rows <= 0 || num_experts <= 0 || n_out <= 0) return;
  MG_CHECK(activation || n_in == n_out, "FP8 cuBLASLt bias: {} columns in, {} out", n_in, n_out);
  MG_CHECK(max_rows <= INT32_MAX && n_in <= INT32_MAX,
           "FP8 cuBLASLt bias: {} rows x {} columns exceed 32-bit indices", max_rows, n_in);
  rows_bias_act_kernel<T><<<blocks_for(max_rows * n_out), kThreads, 0, stream>>>(
      static_cast<const T*>(in), static_cast<int>(n_in), static_cast<T*>(out),
      static_cast<int>(n_out), offsets, static_cast<int>(num_experts), static_cast<int>(max_rows),
      bias, activation, gated, act);
  MG_CUDA_CHECK_LAUNCH();
}

template void launch_fp8_rows_bias_act<__nv_bfloat16>(const void*, int64_t, void*, int64_t,
                                                      const int32_t*, int64_t, int64_t,
                                                      const float*, bool, bool, const MoEActParams&,
                                                      cudaStream_t);
template void launch_fp8_rows_bias_act<__half>(const void*, int64_t, void*, int64_t, const int32_t*,
                                               int64_t, int64_t, const float*, bool, bool,
                                               const MoEActParams&, cudaStream_t);

}  // namespace mg::cuda
