// linear's bias and GEMV kernels instantiated for __half.
#include "ops/nn/linear/linear_cuda.cuh"
#include "ops/nn/linear/linear_gemv_cuda.cuh"

namespace mg::cuda {
template void launch_add_bias<__half>(void*, const void*, int64_t, int64_t, cudaStream_t);
template void launch_gemv<__half, __half>(const GemvArgs&, cudaStream_t);
template void launch_gemv<__half, float>(const GemvArgs&, cudaStream_t);
template void launch_gemv_split<__half>(const GemvSplitArgs&, cudaStream_t);
}  // namespace mg::cuda
