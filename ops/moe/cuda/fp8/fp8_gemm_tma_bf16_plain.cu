// The FP8 grouped GEMM's plain TMA kernel instantiated for __nv_bfloat16.
#include "ops/moe/cuda/fp8/fp8_gemm_tma.cuh"

namespace mg::cuda::fp8 {
template void launch_tma<__nv_bfloat16, false>(const Fp8GemmArgs&, Fp8GemmKernel, cudaStream_t);
}  // namespace mg::cuda::fp8
