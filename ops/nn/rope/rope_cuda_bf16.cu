// rope kernel instantiated for __nv_bfloat16.
#include "ops/nn/rope/rope_cuda.cuh"

namespace mg::cuda {
template void launch_rope<__nv_bfloat16>(const RopeArgs&, cudaStream_t);
}  // namespace mg::cuda
