// add kernel instantiated for float.
#include "ops/nn/add/add_cuda.cuh"

namespace mg::cuda {
template void launch_add<float>(const AddArgs&, cudaStream_t);
}  // namespace mg::cuda
