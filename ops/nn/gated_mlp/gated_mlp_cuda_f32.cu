// gated_mlp's activation kernel instantiated for float.
#include "ops/nn/gated_mlp/gated_mlp_cuda.cuh"

namespace mg::cuda {
template void launch_gated_act<float>(GatedActivation, const GatedActArgs&, cudaStream_t);
}  // namespace mg::cuda
