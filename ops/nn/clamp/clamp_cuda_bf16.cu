// clamp kernel instantiated for __nv_bfloat16.
#include "ops/nn/clamp/clamp_cuda.cuh"

namespace mg::cuda {
template void launch_clamp<__nv_bfloat16>(const ClampArgs&, cudaStream_t);
}  // namespace mg::cuda
