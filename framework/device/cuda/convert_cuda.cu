// dtype conversion kernel: one grid-stride loop per (source, destination) type pair.
#include "framework/device/cuda/convert_cuda.h"
#include "framework/device/cuda/cuda_check.h"
#include "framework/device/cuda/cuda_utils.cuh"

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

template <typename Dst>
void launch_from(DType src_dtype, void* dst, const void* src, int64_t n, cudaStream_t stream) {
  if (src_dtype == DType::kF32) return launch<Dst, float>(dst, src, n, stream);
  if (src_dtype == DType::kF16) return launch<Dst, __half>(dst, src, n, stream);
  if (src_dtype == DType::kBF16) return launch<Dst, __nv_bfloat16>(dst, src, n, stream);
  MG_ASSERT(false, "convert_cuda: source dtype {} is not F32, F16 or BF16", dtype_name(src_dtype));
}

}  // namespace

void convert_cuda(DType dst_dtype, void* dst, DType src_dtype, const void* src, int64_t n,
                  cudaStream_t stream) {
  if (n <= 0 || (dst == src && dst_dtype == src_dtype)) return;
  if (dst_dtype == DType::kF32) return launch_from<float>(src_dtype, dst, src, n, stream);
  if (dst_dtype == DType::kF16) return launch_from<__half>(src_dtype, dst, src, n, stream);
  if (dst_dtype == DType::kBF16) return launch_from<__nv_bfloat16>(src_dtype, dst, src, n, stream);
  MG_ASSERT(false, "convert_cuda: destination dtype {} is not F32, F16 or BF16",
            dtype_name(dst_dtype));
}

}  // namespace mg::cuda
