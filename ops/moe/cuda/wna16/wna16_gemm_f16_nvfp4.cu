// The WNA16 grouped GEMM's FP4 E2M1 kernels (NVFP4: E4M3 scale bytes and a global per part)
// instantiated for __half.
#include "ops/moe/cuda/wna16/wna16_gemm.cuh"

namespace mg::cuda::wna16 {
template void launch_gemm<__half, 4, Wna16Codes::kNvfp4>(const Wna16GemmArgs&, Wna16GemmKernel,
                                                         bool, cudaStream_t);
}  // namespace mg::cuda::wna16
