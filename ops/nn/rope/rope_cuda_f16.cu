// rope kernel instantiated for __half.
#include "ops/nn/rope/rope_cuda.cuh"

namespace mg::cuda {
template void launch_rope<__half>(const RopeArgs&, cudaStream_t);
}  // namespace mg::cuda
