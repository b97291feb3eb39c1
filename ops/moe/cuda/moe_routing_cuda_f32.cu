// The routing kernel instantiated for float.
#include "ops/moe/cuda/moe_routing_cuda.cuh"

namespace mg::cuda {
template void launch_moe_route<float>(const RouteParams&, const void*, int64_t, const float*,
                                      int32_t*, float*, cudaStream_t);
}  // namespace mg::cuda
