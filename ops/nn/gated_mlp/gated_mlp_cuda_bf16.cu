// gated_mlp's activation kernel instantiated for __nv_bfloat16.
#include "ops/nn/gated_mlp/gated_mlp_cuda.cuh"

namespace mg::cuda {
template void launch_gated_act<__nv_bfloat16>(GatedActivation, const GatedActArgs&, cudaStream_t);
}  // namespace mg::cuda
