// linear's bias and GEMV kernels instantiated for float.
#include "ops/nn/linear/linear_cuda.cuh"
#include "ops/nn/linear/linear_gemv_cuda.cuh"

namespace mg::cuda {
template void launch_add_bias<float>(void*, const void*, int64_t, int64_t, cudaStream_t);
template void launch_gemv<float, float>(const GemvArgs&, cudaStream_t);
template void launch_gemv_split<float>(const GemvSplitArgs&, cudaStream_t);
}  // namespace mg::cuda
