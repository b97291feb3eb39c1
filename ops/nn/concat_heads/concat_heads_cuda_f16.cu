// concat_heads kernel instantiated for __half.
#include "ops/nn/concat_heads/concat_heads_cuda.cuh"

namespace mg::cuda {
template void launch_concat_heads<__half>(const ConcatHeadsArgs&, cudaStream_t);
}  // namespace mg::cuda
