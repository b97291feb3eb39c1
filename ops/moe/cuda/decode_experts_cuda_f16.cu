// The decode expert kernels instantiated for __half.
#include "ops/moe/cuda/decode_experts_cuda.cuh"

namespace mg::cuda {
template void launch_decode_experts<__half>(const DecodeExpertsArgs&, cudaStream_t);
template void launch_decode_experts_tiled<__half>(const DecodeExpertsArgs&,
                                                  const DecodeExpertsTiles&, cudaStream_t);
}  // namespace mg::cuda
