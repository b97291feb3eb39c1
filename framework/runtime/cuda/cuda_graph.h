// One captured CUDA graph: the decode step of a Session (`moegraph run --cuda-graph`).
//
// A decode step has one token, fixed device pointers (arena, workspace, KV caches) and reads its
// token id and position from device memory, so the node loop captured once replays for every
// later step: one cudaGraphLaunch instead of one launch per kernel. Host-to-device copies of the
// ids and the logits' copy back stay outside the graph (they involve pageable host memory).
// Built only with MG_WITH_CUDA.
#pragma once

#include <cuda_runtime_api.h>

#include "framework/core/function_ref.h"

namespace mg {

class Stream;

class CudaGraph {
 public:
  CudaGraph() = default;
  ~CudaGraph();
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;

  bool captured() const { return exec_ != nullptr; }
  // Records what `body` queues on `stream` (and on streams it forks and joins) without running
  // it. Throws mg::Error naming the CUDA error when something in `body` cannot be captured.
  void capture(Stream& stream, FunctionRef<void()> body);
  // Queues one replay on `stream`.
  void launch(Stream& stream);

 private:
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
};

}  // namespace mg
