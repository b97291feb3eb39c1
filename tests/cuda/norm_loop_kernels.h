// The RMSNorm block kernels as loops over global memory (rms_norm_block_kernel,
// add_rms_norm_block_kernel: the code every block-sized row took before the register path of
// rms_norm_cuda.cuh), launched on their own (norm_loop_kernels.cu): the bit-exact reference
// fused_ops_cuda_test.cc holds the register path to.
#pragma once

#include <cuda_runtime_api.h>

#include "framework/core/dtype.h"
#include "ops/nn/add_rms_norm/add_rms_norm_cuda.h"
#include "ops/nn/rms_norm/rms_norm_cuda.h"

namespace mg::testing {

// One 512-thread block per row (args.group == args.dim for rms_norm), whatever the row length.
void launch_rms_norm_block_loop(DType dtype, const cuda::RmsNormArgs& args, cudaStream_t stream);
void launch_add_rms_norm_block_loop(DType dtype, const cuda::AddRmsNormArgs& args,
                                    cudaStream_t stream);

}  // namespace mg::testing
