// The WNA16 / FP4 decode experts (wna16_decode_cuda.h) instantiated for __nv_bfloat16: the up and
// down kernels of every code kind (INT4, INT8, MXFP4, NVFP4), gated and plain.
#include "ops/moe/cuda/wna16/wna16_decode_cuda.cuh"

namespace mg::cuda {
template void launch_wna16_decode_experts<__nv_bfloat16>(const Wna16DecodeArgs&,
                                                         const Wna16DecodeTiles&, cudaStream_t);
}  // namespace mg::cuda
