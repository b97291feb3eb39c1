// The FP8 decode experts instantiated for __nv_bfloat16.
#include "ops/moe/cuda/fp8/fp8_decode_cuda.cuh"

namespace mg::cuda {
template void launch_fp8_decode_experts<__nv_bfloat16>(const Fp8DecodeArgs&, cudaStream_t);
}  // namespace mg::cuda
