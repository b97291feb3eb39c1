// Gather, combine and scale_input instantiated for float.
#include "ops/moe/cuda/moe_align_cuda.cuh"

namespace mg::cuda {
template void launch_moe_gather<float>(const void*, int64_t, int64_t, int64_t, const MoEAlignment&,
                                       void*, cudaStream_t);
template void launch_moe_combine<float>(const void*, const MoEAlignment&, const int32_t*,
                                        const float*, const int32_t*, const void*, int64_t, int64_t,
                                        int64_t, void*, cudaStream_t);
template void launch_moe_scale_input<float>(const void*, const float*, int64_t, int64_t, int64_t,
                                            void*, float*, cudaStream_t);
}  // namespace mg::cuda
