// The MoE elementwise launchers instantiated for __half.
#include "ops/moe/cuda/moe_elementwise_cuda.cuh"

namespace mg::cuda {
template void launch_moe_accumulate<__half>(void*, const void*, int64_t, cudaStream_t);
template void launch_moe_scale_rows_sigmoid<__half>(void*, const void*, int64_t, int64_t,
                                                    cudaStream_t);
template void launch_moe_activation<__half>(const void*, int64_t, int64_t, const MoEActParams&,
                                            void*, cudaStream_t);
}  // namespace mg::cuda
