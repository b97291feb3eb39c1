// rms_norm kernels instantiated for __nv_bfloat16.
#include "ops/nn/rms_norm/rms_norm_cuda.cuh"

namespace mg::cuda {
template void launch_rms_norm<__nv_bfloat16>(const RmsNormArgs&, cudaStream_t);
}  // namespace mg::cuda
