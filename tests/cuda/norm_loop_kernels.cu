#include "tests/cuda/norm_loop_kernels.h"

#include "framework/device/cuda/dtype_dispatch.h"
#include "ops/nn/add_rms_norm/add_rms_norm_cuda.cuh"
#include "ops/nn/rms_norm/rms_norm_cuda.cuh"

namespace mg::testing {

void launch_rms_norm_block_loop(DType dtype, const cuda::RmsNormArgs& a, cudaStream_t stream) {
  cuda::dispatch_float_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    cuda::launch_pdl(cuda::rms_norm_block_kernel<T>, dim3(static_cast<unsigned>(a.rows)),
                     dim3(cuda::kRmsNormBlockThreads), 0, stream, static_cast<const T*>(a.x),
                     static_cast<const T*>(a.weight), static_cast<T*>(a.y), a.dim, a.eps, false);
  });
}

void launch_add_rms_norm_block_loop(DType dtype, const cuda::AddRmsNormArgs& a,
                                    cudaStream_t stream) {
  cuda::dispatch_float_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    cuda::launch_pdl(cuda::add_rms_norm_block_kernel<T>, dim3(static_cast<unsigned>(a.rows)),
                     dim3(cuda::kRmsNormBlockThreads), 0, stream, static_cast<const T*>(a.a),
                     static_cast<const T*>(a.b), static_cast<const T*>(a.weight),
                     static_cast<T*>(a.sum), static_cast<T*>(a.y), a.dim, a.scale, a.eps, false);
  });
}

}  // namespace mg::testing
