// The FP8 grouped GEMM's gated kernels instantiated for __half.
#include "ops/moe/cuda/fp8/fp8_gemm_mma.cuh"

namespace mg::cuda::fp8 {
template void launch_gemm<__half, true>(const Fp8GemmArgs&, Fp8GemmKernel, cudaStream_t);
}  // namespace mg::cuda::fp8
