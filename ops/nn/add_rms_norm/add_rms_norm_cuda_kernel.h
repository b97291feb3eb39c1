// The CUDA kernel factory of add_rms_norm (add_rms_norm_cuda_kernel.cc).
#pragma once

#include <memory>

#include "framework/op/op_registry.h"

namespace mg {

// a + b, then rms_norm over whole rows of the sum, in the options' activation dtype.
std::unique_ptr<OpKernel> make_add_rms_norm_cuda_kernel(const KernelContext& ctx, float eps);

}  // namespace mg
