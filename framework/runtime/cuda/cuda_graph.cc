#include "framework/runtime/cuda/cuda_graph.h"

#include "framework/core/error.h"
#include "framework/device/cuda/cuda_check.h"
#include "framework/device/cuda/cuda_device.h"
#include "framework/device/stream.h"

namespace mg {

CudaGraph::~CudaGraph() {
  if (exec_) cudaGraphExecDestroy(exec_);
  if (graph_) cudaGraphDestroy(graph_);
}

void CudaGraph::capture(Stream& stream, FunctionRef<void()> body) {
  MG_ASSERT(!captured(), "CudaGraph::capture called twice");
  const cudaStream_t s = cuda::native(&stream);
  // Thread-local mode: other threads' CUDA calls (another session) do not disturb the capture.
  MG_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  try {
    body();
  } catch (...) {
    cudaGraph_t partial = nullptr;
    cudaStreamEndCapture(s, &partial);  // leave the stream usable
    if (partial) cudaGraphDestroy(partial);
    cudaGetLastError();
    throw;
  }
  MG_CUDA_CHECK(cudaStreamEndCapture(s, &graph_));
  MG_CUDA_CHECK(cudaGraphInstantiate(&exec_, graph_, 0));
}

void CudaGraph::launch(Stream& stream) {
  MG_ASSERT(captured(), "CudaGraph::launch before capture");
  MG_CUDA_CHECK(cudaGraphLaunch(exec_, cuda::native(&stream)));
}

}  // namespace mg
