// The fused router GEMV + routing kernel instantiated for float.
#include "ops/moe/cuda/router_route_cuda.cuh"

namespace mg::cuda {
template void launch_router_route<float>(const RouterRouteArgs&, cudaStream_t);
}  // namespace mg::cuda
