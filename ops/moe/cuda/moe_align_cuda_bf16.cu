// Gather, combine and scale_input instantiated for __nv_bfloat16.
#include "ops/moe/cuda/moe_align_cuda.cuh"

namespace mg::cuda {
template void launch_moe_gather<__nv_bfloat16>(const void*, int64_t, int64_t, int64_t,
                                               const MoEAlignment&, void*, cudaStream_t);
template void launch_moe_combine<__nv_bfloat16>(const void*, const MoEAlignment&, const int32_t*,
                                                const float*, const int32_t*, const void*, int64_t,
                                                int64_t, int64_t, void*, cudaStream_t);
template void launch_moe_scale_input<__nv_bfloat16>(const void*, const float*, int64_t, int64_t,
                                                    int64_t, void*, float*, cudaStream_t);
}  // namespace mg::cuda
