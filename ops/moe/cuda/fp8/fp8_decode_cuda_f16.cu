// The FP8 decode experts instantiated for __half.
#include "ops/moe/cuda/fp8/fp8_decode_cuda.cuh"

namespace mg::cuda {
template void launch_fp8_decode_experts<__half>(const Fp8DecodeArgs&, cudaStream_t);
}  // namespace mg::cuda
