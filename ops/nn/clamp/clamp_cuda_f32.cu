// clamp kernel instantiated for float.
#include "ops/nn/clamp/clamp_cuda.cuh"

namespace mg::cuda {
template void launch_clamp<float>(const ClampArgs&, cudaStream_t);
}  // namespace mg::cuda
