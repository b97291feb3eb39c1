// The large-M path's dequantize kernels (every code kind) instantiated for __nv_bfloat16.
#include "ops/moe/cuda/wna16/wna16_dequant.cuh"

namespace mg::cuda {
template void launch_wna16_dequantize<__nv_bfloat16>(const Wna16DequantArgs&, cudaStream_t);
}  // namespace mg::cuda
