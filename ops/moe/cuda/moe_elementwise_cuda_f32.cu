// The MoE elementwise launchers instantiated for float.
#include "ops/moe/cuda/moe_elementwise_cuda.cuh"

namespace mg::cuda {
template void launch_moe_accumulate<float>(void*, const void*, int64_t, cudaStream_t);
template void launch_moe_scale_rows_sigmoid<float>(void*, const void*, int64_t, int64_t,
                                                   cudaStream_t);
template void launch_moe_activation<float>(const void*, int64_t, int64_t, const MoEActParams&,
                                           void*, cudaStream_t);
}  // namespace mg::cuda
