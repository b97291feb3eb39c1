// The decode expert kernels instantiated for float.
#include "ops/moe/cuda/decode_experts_cuda.cuh"

namespace mg::cuda {
template void launch_decode_experts<float>(const DecodeExpertsArgs&, cudaStream_t);
template void launch_decode_experts_tiled<float>(const DecodeExpertsArgs&,
                                                 const DecodeExpertsTiles&, cudaStream_t);
}  // namespace mg::cuda
