// The router on CUDA (router.h's Router; make_router builds it): gate GEMM through GemmXwt in the
// activation dtype with fp32 accumulation (the router bias in the epilogue), routing by
// launch_moe_route; for up to kRouterRouteMaxRows tokens on 16-byte rows gate_and_route is one
// launch of the fused GEMV + routing kernel (router_route_cuda.h) when MG_FUSED_ROUTE=1 (off by
// default: below).
// Built only with MG_WITH_CUDA.
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

// Whether gate_and_route may take the fused kernel: MG_FUSED_ROUTE (read once; "1" on, unset or
// "0" off, anything else an mg::Error naming the variable), overridden by set_fused_route_enabled
// (tests, bench). A CUDA graph keeps the kernels it captured. Off by default: on an H100
// (2026-11-25, `MG_ROUTE_TIMING=1 mg_cuda_tests --gtest_filter='RouterRouteCuda.Timing*'`, the
// qwen3 router in a CUDA graph) the fused launch took 5.68 / 6.28 / 6.86 / 8.95 us at 1 / 2 / 4 /
// 8 tokens against the two launches' 4.77 / 5.44 / 8.12 / 8.14 (the last block's fence, count
// and L2 round trip cost what the second launch did under programmatic dependent launch), and
// `bench e2e q48 --cuda-graph` decoded 206.7 tokens/s with it, 208.7 without.
bool fused_route_enabled();
void set_fused_route_enabled(bool enabled);
// Turns the fused kernel on or off for a scope (tests and benches that compare both paths), then
// back to what it was.
class ScopedFusedRoute {
 public:
  explicit ScopedFusedRoute(bool enabled) : before_(fused_route_enabled()) {
    set_fused_route_enabled(enabled);
  }
  ~ScopedFusedRoute() { set_fused_route_enabled(before_); }
  ScopedFusedRoute(const ScopedFusedRoute&) = delete;
  ScopedFusedRoute& operator=(const ScopedFusedRoute&) = delete;

 private:
  bool before_;
};
// What MG_FUSED_ROUTE's value asks for (null: unset).
bool fused_route_requested_by(const char* value);

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
  void gate_and_route(const void* x, int64_t num_tokens, void* logits, int32_t* ids, float* weights,
                      float* scratch, const RouterRun& run) const override;
  bool fuses_route(const void* x, int64_t num_tokens, const RouterRun& run) const override;
  int64_t route_counters() const override { return 1; }

  // Rows up to which gate_and_route fuses (default cuda::kRouterRouteMaxRows; 0: never) and up
  // to which gate() takes the GEMV kernel (GemmXwt::set_gemv_max_rows). For the tests and the
  // bench that compare the two paths on the same logits; not thread-safe with calls.
  void set_fused_max_rows(int64_t rows) { fused_max_rows_ = rows; }
  void set_gemv_max_rows(int64_t rows) { gemm_.set_gemv_max_rows(rows); }

 private:
  cuda::RouteParams params_;
  Tensor weight_;                 // [E, H] device, the activation dtype
  Tensor router_bias_;            // [E] device F32, or undefined
  Tensor score_correction_bias_;  // [E] device F32, or undefined
  cuda::GemmXwt gemm_;
  int64_t fused_max_rows_;
};

}  // namespace mg
