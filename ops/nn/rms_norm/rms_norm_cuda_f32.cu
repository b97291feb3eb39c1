// rms_norm kernels instantiated for float.
#include "ops/nn/rms_norm/rms_norm_cuda.cuh"

namespace mg::cuda {
template void launch_rms_norm<float>(const RmsNormArgs&, cudaStream_t);
}  // namespace mg::cuda
