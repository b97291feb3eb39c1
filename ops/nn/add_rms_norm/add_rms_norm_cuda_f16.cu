// add_rms_norm kernels instantiated for __half.
#include "ops/nn/add_rms_norm/add_rms_norm_cuda.cuh"

namespace mg::cuda {
template void launch_add_rms_norm<__half>(const AddRmsNormArgs&, cudaStream_t);
}  // namespace mg::cuda
