// The CUDA kernel factory of qk_norm_rope (qk_norm_rope_cuda_kernel.cc).
#pragma once

#include <memory>

#include "framework/op/op_registry.h"
#include "proto/model.pb.h"

namespace mg {

// Per-head rms_norm then rope of q and k in one launch, in the options' activation dtype.
std::unique_ptr<OpKernel> make_qk_norm_rope_cuda_kernel(const KernelContext& ctx,
                                                        const proto::QkNormRopeParams& params);

}  // namespace mg
