// add kernel instantiated for __nv_bfloat16.
#include "ops/nn/add/add_cuda.cuh"

namespace mg::cuda {
template void launch_add<__nv_bfloat16>(const AddArgs&, cudaStream_t);
}  // namespace mg::cuda
