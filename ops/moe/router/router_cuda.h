// The CUDA half of Router (router.h): gate GEMM through cuBLASLt in the activation dtype with
// fp32 accumulation (the router bias in the epilogue), routing by launch_moe_route. Built only
// with MG_WITH_CUDA.
#pragma once

#include <cstddef>
#include <cstdint>

#include "framework/core/tensor.h"
#include "ops/moe/config.h"
#include "ops/moe/cuda/moe_cuda_types.h"
#include "ops/nn/linear/linear_gemm_cuda.h"

namespace mg {

class Stream;

// RoutingConfig as the routing kernel takes it.
cuda::RouteParams route_params(const RoutingConfig& config);
// "" when the CUDA routing kernel handles `config`, else why not.
std::string check_cuda_routing(const RoutingConfig& config);

class RouterCuda {
 public:
  // See Router::on_cuda.
  RouterCuda(const RoutingConfig& config, int64_t hidden_size, DType dtype, const Tensor& weight,
             const Tensor& router_bias, const Tensor& score_correction_bias);

  // Logits are F32 whatever the activation dtype.
  DType dtype() const { return DType::kF32; }
  size_t gate_workspace_bytes() const { return cuda::GemmXwt::kWorkspaceBytes; }
  // [E] F32 on the device, or null.
  const float* score_correction_bias() const;

  void gate(const void* x, int64_t num_tokens, void* logits, void* workspace,
            size_t workspace_bytes, Stream* stream) const;
  void route(const void* logits, int64_t num_tokens, int32_t* ids, float* weights,
             Stream* stream) const;

 private:
  DType dtype_;
  cuda::RouteParams params_;
  Tensor weight_;                 // [E, H] device, dtype_
  Tensor router_bias_;            // [E] device F32, or undefined
  Tensor score_correction_bias_;  // [E] device F32, or undefined
  cuda::GemmXwt gemm_;
};

}  // namespace mg
