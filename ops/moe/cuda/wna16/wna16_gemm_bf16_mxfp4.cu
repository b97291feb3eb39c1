// The WNA16 grouped GEMM's FP4 E2M1 kernels (MXFP4: E8M0 scale bytes) instantiated for
// __nv_bfloat16.
#include "ops/moe/cuda/wna16/wna16_gemm.cuh"

namespace mg::cuda::wna16 {
template void launch_gemm<__nv_bfloat16, 4, Wna16Codes::kMxfp4>(const Wna16GemmArgs&,
                                                                Wna16GemmKernel, bool,
                                                                cudaStream_t);
}  // namespace mg::cuda::wna16
