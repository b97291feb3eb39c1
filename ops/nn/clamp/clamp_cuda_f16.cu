// clamp kernel instantiated for __half.
#include "ops/nn/clamp/clamp_cuda.cuh"

namespace mg::cuda {
template void launch_clamp<__half>(const ClampArgs&, cudaStream_t);
}  // namespace mg::cuda
