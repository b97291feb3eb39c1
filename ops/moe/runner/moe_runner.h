// MoERunner: one MoE node's forward on one rank: gate -> route -> kernel, shared experts on a
// side stream, the DP chunk loop and the output reduction.
//
//   x [M, H] (this rank's tokens) -> out [M, H]
//   max_dp = max of M over the DP group (all-reduce); step = min(dp_chunk_size, max_dp)
//   (dp_chunk_size 0: step = max_dp); every rank runs ceil(max_dp / step) steps, a rank out of
//   tokens with an empty chunk, so the collectives inside the kernel stay in lockstep.
//   per step, rows [begin, begin + n):
//     fork: the side stream waits for the main stream (steps of <= side_stream_max_tokens)
//     logits [n, E]   = router.gate(x)                      main stream
//     ids, w [n, k]   = router.route(logits)                modular kernels, and monolithic
//                                                           ones that take routed ids when the
//                                                           router fuses (below)
//     shared [n, H]   = shared_experts(x)                   side stream (gated by sigmoid)
//     out    [n, H]   = kernel(x, ids, w | logits)          prepare -> experts -> finalize
//     join: the main stream waits for the side stream
//     out += shared; all-reduce over the TP group when tp > 1 and the kernel left partial sums
//     (if the kernel already reduced, only the shared partials are all-reduced first)
// gate + route is Router::gate_and_route: one launch on CUDA at decode sizes (the fused GEMV +
// routing kernel, router_route_cuda.h) when the context has the session's route counters. A
// monolithic kernel routes from the logits itself, unless it takes routed ids
// (FusedMoEKernel::monolithic_takes_routing) and the router fuses: then the runner routes.
// routed_scaling_factor is already in the weights (the routing applies it after renormalising,
// as HF does), so the runner does not scale again.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "framework/parallel/parallel_config.h"
#include "ops/moe/kernel/fused_moe_kernel.h"
#include "ops/moe/router/router.h"
#include "ops/moe/runner/shared_experts.h"

namespace mg {

class Communicator;
class Event;
class Stream;

struct MoERunContext {
  ThreadPool* pool = nullptr;
  Stream* stream = nullptr;       // main stream
  Stream* side_stream = nullptr;  // shared experts; null: run them on the main stream
  Event* fork = nullptr;          // with side_stream
  Event* join = nullptr;
  // Steps of more tokens run the shared experts on the main stream (vLLM's
  // shared-experts-stream threshold): one stream already fills the GPU there.
  int64_t side_stream_max_tokens = 256;
  // The tp x dp ranks of ParallelConfig (world rank order); null for a single rank.
  Communicator* comm = nullptr;
  // The router's route_counters() arrival counters of this session (RouterRun), or null.
  unsigned* route_counters = nullptr;
};

class MoERunner {
 public:
  // `shared` is null when the node has no shared experts.
  MoERunner(MoEConfig config, ParallelConfig parallel, std::unique_ptr<Router> router,
            std::unique_ptr<FusedMoEKernel> kernel, std::unique_ptr<SharedExperts> shared);

  const FusedMoEKernel& kernel() const { return *kernel_; }
  const Router& router() const { return *router_; }
  const ParallelConfig& parallel() const { return parallel_; }

  // Scratch for calls whose DP group has at most `max_tokens` tokens per rank.
  size_t workspace_bytes(int64_t max_tokens) const;

  // out [M, H] for x [M, H]. Collective over ctx.comm: every rank of the tp x dp grid calls it.
  // x and out are in the activation dtype of the kernel (ExpertsShape::dtype) on its device.
  void forward(const void* x, int64_t num_tokens, void* out, void* workspace,
               size_t workspace_bytes, const MoERunContext& ctx);

 private:
  struct Buffers;
  size_t step_bytes(int64_t step) const;

  MoEConfig config_;
  ParallelConfig parallel_;
  // World ranks of this rank's DP and TP groups (computed once: no allocation per forward).
  std::vector<int> dp_ranks_;
  std::vector<int> tp_ranks_;
  std::unique_ptr<Router> router_;
  std::unique_ptr<FusedMoEKernel> kernel_;
  std::unique_ptr<SharedExperts> shared_;  // or null
  DType dtype_;                            // of the activations
};

}  // namespace mg
