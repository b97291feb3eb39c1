// The FP8 grouped GEMM's gated TMA kernel instantiated for __half.
#include "ops/moe/cuda/fp8/fp8_gemm_tma.cuh"

namespace mg::cuda::fp8 {
template void launch_tma<__half, true>(const Fp8GemmArgs&, Fp8GemmKernel, cudaStream_t);
}  // namespace mg::cuda::fp8
