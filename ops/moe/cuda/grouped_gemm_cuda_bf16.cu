// The grouped expert GEMM instantiated for __nv_bfloat16.
#include "ops/moe/cuda/grouped_gemm_cuda.cuh"

namespace mg::cuda {
template void launch_grouped_gemm<__nv_bfloat16>(const GroupedGemmArgs&, cudaStream_t);
}  // namespace mg::cuda
