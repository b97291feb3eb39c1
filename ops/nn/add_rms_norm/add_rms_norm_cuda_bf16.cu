// add_rms_norm kernels instantiated for __nv_bfloat16.
#include "ops/nn/add_rms_norm/add_rms_norm_cuda.cuh"

namespace mg::cuda {
template void launch_add_rms_norm<__nv_bfloat16>(const AddRmsNormArgs&, cudaStream_t);
}  // namespace mg::cuda
