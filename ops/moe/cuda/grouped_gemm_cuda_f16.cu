// The grouped expert GEMM instantiated for __half.
#include "ops/moe/cuda/grouped_gemm_cuda.cuh"

namespace mg::cuda {
template void launch_grouped_gemm<__half>(const GroupedGemmArgs&, GroupedGemmKernel, cudaStream_t);
}  // namespace mg::cuda
