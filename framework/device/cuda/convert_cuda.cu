// dtype conversion kernel: one grid-stride loop per (source, destination) type pair.
#include "framework/device/cuda/convert_cuda.h"
#include "framework/device/cuda/cuda_check.h"
#include "framework/device/cuda/cuda_utils.cuh"
#include "framework/device/cuda/dtype_dispatch.h"

namespace mg::cuda {

namespace {

template <typename Dst, typename Src>
__global__ void convert_kernel(Dst* dst, const Src* src, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    dst[i] = from_float<Dst>(to_float(src[i]));
  }
}

template <typename Dst, typename Src>
void launch(void* dst, const void* src, int64_t n, cudaStream_t stream) {
  constexpr int kThreads = 256;
  convert_kernel<Dst, Src><<<grid_stride_blocks(n, kThreads), kThreads, 0, stream>>>(
      static_cast<Dst*>(dst), static_cast<const Src*>(src), n);
  MG_CUDA_CHECK_LAUNCH();
}

}  // namespace

void convert_cuda(DType dst_dtype, void* dst, DType src_dtype, const void* src, int64_t n,
                  cudaStream_t stream) {
  if (n <= 0 || (dst == src && dst_dtype == src_dtype)) return;
  dispatch_float_dtype(dst_dtype, [&](auto dst_tag) {
    dispatch_float_dtype(src_dtype, [&](auto src_tag) {
      launch<decltype(dst_tag), decltype(src_tag)>(dst, src, n, stream);
    });
  });
}

}  // namespace mg::cuda
