// rms_norm kernels instantiated for __half.
#include "ops/nn/rms_norm/rms_norm_cuda.cuh"

namespace mg::cuda {
template void launch_rms_norm<__half>(const RmsNormArgs&, cudaStream_t);
}  // namespace mg::cuda
