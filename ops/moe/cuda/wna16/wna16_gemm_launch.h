// The WNA16 grouped GEMM launchers per activation dtype, bit width, code kind and (integer codes)
// path, each instantiated in its own wna16_gemm_<dtype>_<int4|int8|mxfp4|nvfp4>[_exact].cu (three
// tiles, gated and plain; the exact path has no 64-row tile); launch_wna16_grouped_gemm
// (wna16_experts_cuda.cc) picks one (wna16_gemm_exact). Host-only.
#pragma once

#include <cuda_runtime_api.h>

#include "ops/moe/cuda/wna16/wna16_experts_cuda.h"

namespace mg::cuda::wna16 {

// Gated: b holds 2 parts (gate, up) of part_rows rows per expert, the epilogue is act(gate, up).
// Plain: one part, bias or bias + plain activation. Exact: integer codes whose zero points are
// integer codes (Wna16Zeros::kIntegerCodes) through the exact q - z (wna16_gemm.cuh).
template <typename T, int Bits, Wna16Codes Codes, bool Exact = false>
void launch_gemm(const Wna16GemmArgs& args, Wna16GemmKernel kernel, bool gated,
                 cudaStream_t stream);

// The wgmma kernel (wna16_wgmma.cuh; wna16_wgmma_<dtype>.cu): refuses with the reason what it
// does not take (wgmma_gemm_check).
template <typename T>
void launch_wgmma_gemm(const Wna16GemmArgs& args, bool gated, cudaStream_t stream);

}  // namespace mg::cuda::wna16
