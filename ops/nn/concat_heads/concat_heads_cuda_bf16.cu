// concat_heads kernel instantiated for __nv_bfloat16.
#include "ops/nn/concat_heads/concat_heads_cuda.cuh"

namespace mg::cuda {
template void launch_concat_heads<__nv_bfloat16>(const ConcatHeadsArgs&, cudaStream_t);
}  // namespace mg::cuda
