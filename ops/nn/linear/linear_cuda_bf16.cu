// linear's bias and GEMV kernels instantiated for __nv_bfloat16.
#include "ops/nn/linear/linear_cuda.cuh"
#include "ops/nn/linear/linear_gemv_cuda.cuh"

namespace mg::cuda {
template void launch_add_bias<__nv_bfloat16>(void*, const void*, int64_t, int64_t, cudaStream_t);
template void launch_gemv<__nv_bfloat16, __nv_bfloat16>(const GemvArgs&, cudaStream_t);
template void launch_gemv<__nv_bfloat16, float>(const GemvArgs&, cudaStream_t);
template void launch_gemv_split<__nv_bfloat16>(const GemvSplitArgs&, cudaStream_t);
}  // namespace mg::cuda
