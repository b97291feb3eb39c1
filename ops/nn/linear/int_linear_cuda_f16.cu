// The weight-only integer linear's GEMV and dequantize kernels instantiated for __half.
#include "ops/nn/linear/int_linear_cuda.cuh"

namespace mg::cuda {
template void launch_int_gemv<__half>(const IntLinearWeights&, const IntGemvArgs&, cudaStream_t);
template void launch_int_dequant<__half>(const IntLinearWeights&, void*, cudaStream_t);
}  // namespace mg::cuda
