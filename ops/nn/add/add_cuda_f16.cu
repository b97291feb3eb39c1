// add kernel instantiated for __half.
#include "ops/nn/add/add_cuda.cuh"

namespace mg::cuda {
template void launch_add<__half>(const AddArgs&, cudaStream_t);
}  // namespace mg::cuda
