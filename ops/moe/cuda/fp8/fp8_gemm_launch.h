// The FP8 grouped GEMM launchers per epilogue kind, each instantiated in its own
// fp8_gemm_mma_<dtype>_<gated|plain>.cu so that no compile job holds more than two kernels (the
// wgmma and TMA ones apart, in fp8_gemm_{wgmma,tma}_<dtype>_<gated|plain>.cu);
// launch_fp8_grouped_gemm (fp8_experts_cuda.cc) picks one. Host-only.
#pragma once

#include <cuda_runtime_api.h>

#include "ops/moe/cuda/fp8/fp8_experts_cuda.h"

namespace mg::cuda::fp8 {

// Gated: b holds 2N rows per expert (gate, up), the epilogue is act(gate, up). Plain: N rows,
// bias or bias + plain activation.
template <typename T, bool Gated>
void launch_gemm(const Fp8GemmArgs& args, Fp8GemmKernel kernel, cudaStream_t stream);

// The wgmma kernel (fp8_gemm_wgmma.cuh), in fp8_gemm_wgmma_<dtype>_<gated|plain>.cu.
template <typename T, bool Gated>
void launch_wgmma(const Fp8GemmArgs& args, cudaStream_t stream);

// The TMA kernels (fp8_gemm_tma.cuh: kernel fp8_tma or fp8_tma64), in
// fp8_gemm_tma_<dtype>_<gated|plain>.cu.
template <typename T, bool Gated>
void launch_tma(const Fp8GemmArgs& args, Fp8GemmKernel kernel, cudaStream_t stream);

}  // namespace mg::cuda::fp8
