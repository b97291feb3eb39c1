// The weight-only integer linear's GEMV and dequantize kernels instantiated for __nv_bfloat16.
#include "ops/nn/linear/int_linear_cuda.cuh"

namespace mg::cuda {
template void launch_int_gemv<__nv_bfloat16>(const IntLinearWeights&, const IntGemvArgs&,
                                             cudaStream_t);
template void launch_int_dequant<__nv_bfloat16>(const IntLinearWeights&, void*, cudaStream_t);
}  // namespace mg::cuda
