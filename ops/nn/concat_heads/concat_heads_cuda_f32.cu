// concat_heads kernel instantiated for float.
#include "ops/nn/concat_heads/concat_heads_cuda.cuh"

namespace mg::cuda {
template void launch_concat_heads<float>(const ConcatHeadsArgs&, cudaStream_t);
}  // namespace mg::cuda
