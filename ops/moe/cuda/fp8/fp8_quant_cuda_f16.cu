// The FP8 activation quantisation instantiated for __half.
#include "ops/moe/cuda/fp8/fp8_quant_cuda.cuh"

namespace mg::cuda {
template void launch_fp8_quantize<__half>(const Fp8QuantArgs&, cudaStream_t);
}  // namespace mg::cuda
