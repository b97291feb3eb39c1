// The fused router GEMV + routing kernel instantiated for __nv_bfloat16.
#include "ops/moe/cuda/router_route_cuda.cuh"

namespace mg::cuda {
template void launch_router_route<__nv_bfloat16>(const RouterRouteArgs&, cudaStream_t);
}  // namespace mg::cuda
