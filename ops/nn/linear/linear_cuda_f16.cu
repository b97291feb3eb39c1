// linear's bias kernel instantiated for __half.
#include "ops/nn/linear/linear_cuda.cuh"

namespace mg::cuda {
template void launch_add_bias<__half>(void*, const void*, int64_t, int64_t, cudaStream_t);
}  // namespace mg::cuda
