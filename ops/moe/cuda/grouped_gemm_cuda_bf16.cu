// The grouped expert GEMM instantiated for __nv_bfloat16, and the sm_90a query.
#include "ops/moe/cuda/grouped_gemm_cuda.cuh"

namespace mg::cuda {
template void launch_grouped_gemm<__nv_bfloat16>(const GroupedGemmArgs&, GroupedGemmKernel,
                                                 cudaStream_t);

// Every dtype's sm_90a kernels are compiled under the same flag; BF16's answer holds for all.
bool grouped_gemm_sm90a_kernels() {
  return grouped_gemm::wgmma_available<__nv_bfloat16>();
}
}  // namespace mg::cuda
