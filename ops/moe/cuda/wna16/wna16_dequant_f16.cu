// The large-M path's dequantize kernels (every code kind) instantiated for __half.
#include "ops/moe/cuda/wna16/wna16_dequant.cuh"

namespace mg::cuda {
template void launch_wna16_dequantize<__half>(const Wna16DequantArgs&, cudaStream_t);
}  // namespace mg::cuda
