// The WNA16 grouped GEMM's INT4 kernels on the exact path (integer zero points: q - z exact in
// T, the group scale applied to fp32 group sums) instantiated for __nv_bfloat16.
#include "ops/moe/cuda/wna16/wna16_gemm.cuh"

namespace mg::cuda::wna16 {
template void launch_gemm<__nv_bfloat16, 4, Wna16Codes::kInteger, true>(const Wna16GemmArgs&,
                                                                        Wna16GemmKernel, bool,
                                                                        cudaStream_t);
}  // namespace mg::cuda::wna16
