// The router on CUDA (router.h's Router; make_router builds it): gate GEMM through cuBLASLt in the
// activation dtype with fp32 accumulation (the router bias in the epilogue), routing by
// launch_moe_route. Built only with MG_WITH_CUDA.
#pragma once

#include <cstddef>
#include <cstdint>

#include "framework/core/tensor.h"
#include "ops/moe/config.h"
#include "ops/moe/cuda/moe_cuda_types.h"
#include "ops/moe/router/router.h"
#include "ops/nn/linear/linear_gemm_cuda.h"

namespace mg {

class Stream;

// RoutingConfig as the routing kernel takes it.
cuda::RouteParams route_params(const RoutingConfig& config);
// "" when the CUDA routing kernel handles `config`, else why not.
std::string check_cuda_routing(const RoutingConfig& config);

class CudaRouter final : public Router {
 public:
  // weight [E, H] in `dtype` on a CUDA device (as the plan places it), router_bias and
  // score_correction_bias [E] host F32 (uploaded as F32). Throws mg::Error when the routing does
  // not fit the CUDA kernel.
  CudaRouter(const RoutingConfig& config, int64_t hidden_size, DType dtype, const Tensor& weight,
             const Tensor& router_bias, const Tensor& score_correction_bias);

  // [E] F32 on the device, or null.
  const float* score_correction_bias() const override;
  size_t gate_workspace_bytes() const override { return cuda::GemmXwt::kWorkspaceBytes; }
  int64_t route_scratch_floats(int64_t) const override { return 0; }
  // Logits are F32 whatever the activation dtype; queued on run.stream.
  void gate(const void* x, int64_t num_tokens, void* logits, const RouterRun& run) const override;
  void route(const void* logits, int64_t num_tokens, int32_t* ids, float* weights, float* scratch,
             const RouterRun& run) const override;

 private:
  cuda::RouteParams params_;
  Tensor weight_;                 // [E, H] device, the activation dtype
  Tensor router_bias_;            // [E] device F32, or undefined
  Tensor score_correction_bias_;  // [E] device F32, or undefined
  cuda::GemmXwt gemm_;
};

}  // namespace mg
