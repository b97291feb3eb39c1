// The decode expert kernels instantiated for __nv_bfloat16.
#include "ops/moe/cuda/decode_experts_cuda.cuh"

namespace mg::cuda {
template void launch_decode_experts<__nv_bfloat16>(const DecodeExpertsArgs&, cudaStream_t);
template void launch_decode_experts_tiled<__nv_bfloat16>(const DecodeExpertsArgs&,
                                                         const DecodeExpertsTiles&, cudaStream_t);
}  // namespace mg::cuda
