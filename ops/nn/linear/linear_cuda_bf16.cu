// linear's bias kernel instantiated for __nv_bfloat16.
#include "ops/nn/linear/linear_cuda.cuh"

namespace mg::cuda {
template void launch_add_bias<__nv_bfloat16>(void*, const void*, int64_t, int64_t, cudaStream_t);
}  // namespace mg::cuda
