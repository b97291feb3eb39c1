// The FP8 grouped GEMM's plain TMA kernel instantiated for __half.
#include "ops/moe/cuda/fp8/fp8_gemm_tma.cuh"

namespace mg::cuda::fp8 {
template void launch_tma<__half, false>(const Fp8GemmArgs&, Fp8GemmKernel, cudaStream_t);
}  // namespace mg::cuda::fp8
