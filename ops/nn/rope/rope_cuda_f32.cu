// rope kernel instantiated for float.
#include "ops/nn/rope/rope_cuda.cuh"

namespace mg::cuda {
template void launch_rope<float>(const RopeArgs&, cudaStream_t);
}  // namespace mg::cuda
