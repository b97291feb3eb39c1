// gated_mlp's activation kernel instantiated for __half.
#include "ops/nn/gated_mlp/gated_mlp_cuda.cuh"

namespace mg::cuda {
template void launch_gated_act<__half>(GatedActivation, const GatedActArgs&, cudaStream_t);
}  // namespace mg::cuda
