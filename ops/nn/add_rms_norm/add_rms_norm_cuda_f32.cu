// add_rms_norm kernels instantiated for float.
#include "ops/nn/add_rms_norm/add_rms_norm_cuda.cuh"

namespace mg::cuda {
template void launch_add_rms_norm<float>(const AddRmsNormArgs&, cudaStream_t);
}  // namespace mg::cuda
