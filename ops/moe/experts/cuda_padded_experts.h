// cuda_padded: the last entry of the unquantized CUDA priority list, the one with no alignment
// requirement. Every other CUDA expert backend needs 16-byte rows (hidden and intermediate sizes
// multiples of 8); this one runs any shape the CPU runs, in BF16, F16 and F32, by padding:
//
//   compile time  the canonical weights are zero-padded once to Hp = roundup(H, 8) and
//                 Ip = roundup(I, 8): w13 [E, 2 Ip, Hp] (gate rows at 0, up rows at Ip),
//                 w2 [E, Hp, Ip], biases to match; then handed to cuda_moe with the padded shape.
//   each call     when H is not aligned, x [M, H] is copied into [M, Hp] with zero pad columns
//                 (cudaMemcpy2DAsync + cudaMemset2DAsync), cuda_moe runs on it, and the first H
//                 columns of its [M, Hp] output are copied out. When only I is unaligned the
//                 activations are used as they are: the padding lives in the weights alone.
//
// Why padding rather than predicated loads in a kernel of its own: it reuses every tuned kernel
// of cuda_moe as it is (the decode kernels, the grouped MMA/WGMMA/TMA GEMMs, the cuBLAS path) and
// its per-batch choice, so an odd-sized model decodes at nearly the speed of its aligned
// neighbour instead of on a scalar fallback, with no new kernel to compile and test per dtype.
// The zero rows and columns change nothing: padded inputs and weights are 0, every activation
// maps (gate 0, up 0) to a finite value, and w2's padded columns are 0, so the padded
// intermediate columns contribute nothing and the padded output columns are never read. What it
// costs: at most 7 extra elements per weight row (memory and bandwidth, under 1% above a few
// hundred columns) and, for unaligned H, two [M, H] copies per call. The copies are memcpy and
// memset nodes, so a CUDA graph captures them.
#pragma once

#include "ops/moe/kernel/experts.h"

namespace mg {

const ExpertsBackend& cuda_padded_backend();

// The size the padded backend runs `n` (hidden or intermediate) at: the next multiple of 8.
int64_t cuda_padded_size(int64_t n);

}  // namespace mg
