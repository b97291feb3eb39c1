// The router of one MoE node: gate GEMM (logits = x W_r^T + b_r) and routing (routing.h).
//
//   x       [M, H]  activation dtype (F32 on the CPU)
//   logits  [M, E]  fp32   gate(): fp32 accumulation and output on every device, so that BF16
//                          rounding never flips a close expert selection
//   ids     [M, k]  int32  route(), global expert ids, best first
//   weights [M, k]  fp32   route(), routed_scaling_factor included
//
// Router is the interface the runner calls; make_router builds the class of the device:
// CpuRouter (here: F32 on the thread pool) or CudaRouter (router_cuda.h: the gate as one
// cuBLASLt GEMM and the routing as one kernel, both queued on the caller's stream).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "framework/core/tensor.h"
#include "framework/device/device.h"
#include "ops/moe/config.h"

namespace mg {

class Stream;
class ThreadPool;

// Where a router call runs: the CPU pool, or a CUDA stream with cuBLAS scratch.
struct RouterRun {
  ThreadPool* pool = nullptr;
  Stream* stream = nullptr;
  void* blas_workspace = nullptr;  // gate_workspace_bytes()
  size_t blas_workspace_bytes = 0;
  // route_counters() arrival counters of this session, zero between calls (the MoE op's state),
  // or null: gate_and_route() then always takes two launches.
  unsigned* route_counters = nullptr;
};

class Router {
 public:
  virtual ~Router() = default;

  const RoutingConfig& config() const { return config_; }
  int64_t hidden_size() const { return hidden_size_; }
  // Element type of the logits: F32 on every device.
  DType logits_dtype() const { return DType::kF32; }
  // [E] or null; on the router's device (F32).
  virtual const float* score_correction_bias() const = 0;
  // Scratch one gate() needs (cuBLAS workspace on CUDA, 0 on the CPU).
  virtual size_t gate_workspace_bytes() const = 0;
  // Floats of scratch route() needs for `num_tokens` rows.
  virtual int64_t route_scratch_floats(int64_t num_tokens) const = 0;

  // logits [M, E] = x [M, H] W_r^T (+ b_r).
  virtual void gate(const void* x, int64_t num_tokens, void* logits,
                    const RouterRun& run) const = 0;
  virtual void route(const void* logits, int64_t num_tokens, int32_t* ids, float* weights,
                     float* scratch, const RouterRun& run) const = 0;

  // gate() then route(), as one launch where fuses_route() says so (CUDA, decode-sized calls:
  // router_route_cuda.h). The logits are written either way; ids and weights are the same bits.
  virtual void gate_and_route(const void* x, int64_t num_tokens, void* logits, int32_t* ids,
                              float* weights, float* scratch, const RouterRun& run) const;
  // Whether gate_and_route(x, num_tokens, ..., run) is one launch.
  virtual bool fuses_route(const void* /*x*/, int64_t /*num_tokens*/,
                           const RouterRun& /*run*/) const {
    return false;
  }
  // Arrival counters the one-launch path needs per session (RouterRun::route_counters): device
  // memory the op's state holds and zeroes once. 0: none.
  virtual int64_t route_counters() const { return 0; }

 protected:
  Router(RoutingConfig config, int64_t hidden_size);

  RoutingConfig config_;
  int64_t hidden_size_;
};

// The router on the CPU, all in F32.
class CpuRouter final : public Router {
 public:
  // weight [E, H] F32; router_bias [E] F32 iff config.has_router_bias; score_correction_bias
  // [E] F32 iff config.has_score_correction_bias (undefined tensors otherwise). Host tensors.
  CpuRouter(RoutingConfig config, int64_t hidden_size, Tensor weight, Tensor router_bias,
            Tensor score_correction_bias);

  const float* score_correction_bias() const override;
  size_t gate_workspace_bytes() const override { return 0; }
  int64_t route_scratch_floats(int64_t num_tokens) const override;
  void gate(const void* x, int64_t num_tokens, void* logits, const RouterRun& run) const override;
  void route(const void* logits, int64_t num_tokens, int32_t* ids, float* weights, float* scratch,
             const RouterRun& run) const override;

  // Host-typed conveniences for tests.
  void gate(const float* x, int64_t num_tokens, float* logits, ThreadPool* pool) const {
    gate(x, num_tokens, logits, RouterRun{pool});
  }
  void route(const float* logits, int64_t num_tokens, int32_t* ids, float* weights, float* scratch,
             ThreadPool* pool) const {
    route(static_cast<const void*>(logits), num_tokens, ids, weights, scratch, RouterRun{pool});
  }

 private:
  Tensor weight_;
  Tensor router_bias_;
  Tensor score_correction_bias_;
};

// The router of `device`. `weight` [E, H] as the plan places it (CPU: host F32; CUDA: `dtype` on
// that device); router_bias and score_correction_bias [E] host F32 (undefined when the config
// has none; CUDA uploads them as F32). Throws mg::Error when the routing does not fit the
// device's kernel, or for a device this build lacks.
std::unique_ptr<Router> make_router(Device device, const RoutingConfig& config, int64_t hidden_size,
                                    DType dtype, const Tensor& weight, const Tensor& router_bias,
                                    const Tensor& score_correction_bias);

}  // namespace mg
