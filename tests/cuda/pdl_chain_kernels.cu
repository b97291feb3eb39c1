#include "tests/cuda/pdl_chain_kernels.h"

#include <cuda_runtime.h>

#include <vector>

#include "framework/device/cuda/cuda_check.h"
#include "framework/device/cuda/pdl.cuh"

namespace mg::testing {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ uint64_t global_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Waits for the kernel before (the previous round's consumer still reads `buffer`), lets the
// consumer launch at once, then spins before writing: the consumer is resident long before the
// values it must see exist.
__global__ void producer_kernel(int32_t* buffer, int elements, int32_t round, int spin_us) {
  cuda::pdl_wait();
  cuda::pdl_launch_dependents();
  const uint64_t until = global_ns() + static_cast<uint64_t>(spin_us) * 1000u;
  while (global_ns() < until) {
  }
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < elements) buffer[i] = round;
}

__global__ void consumer_kernel(const int32_t* buffer, int32_t* out_row, int elements) {
  cuda::pdl_wait();
  cuda::pdl_launch_dependents();
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < elements) out_row[i] = buffer[i];
}

// The rule broken on purpose: the read comes before pdl_wait.
__global__ void early_consumer_kernel(const int32_t* buffer, int32_t* out_row, int elements) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  const int32_t v = i < elements ? buffer[i] : 0;
  cuda::pdl_wait();
  if (i < elements) out_row[i] = v;
}

// Touches nothing; by rule 2 it still waits, so its completion implies the producer's.
__global__ void middle_kernel() {
  cuda::pdl_wait();
  cuda::pdl_launch_dependents();
}

struct Resources {
  cudaStream_t a = nullptr, b = nullptr;
  cudaEvent_t fork = nullptr, join = nullptr;
  int32_t* buffer = nullptr;
  int32_t* out = nullptr;
  int32_t* scratch = nullptr;
  ~Resources() {
    cudaFree(buffer);
    cudaFree(out);
    cudaFree(scratch);
    if (fork) cudaEventDestroy(fork);
    if (join) cudaEventDestroy(join);
    if (a) cudaStreamDestroy(a);
    if (b) cudaStreamDestroy(b);
  }
};

void queue_rounds(PdlChain chain, const Resources& r, int rounds, int elements, int spin_us) {
  const dim3 grid((elements + kThreads - 1) / kThreads), block(kThreads);
  for (int round = 0; round < rounds; ++round) {
    int32_t* row = r.out + static_cast<int64_t>(round) * elements;
    cuda::launch_pdl(producer_kernel, grid, block, 0, r.a, r.buffer, elements, round, spin_us);
    switch (chain) {
      case PdlChain::kDirect:
        cuda::launch_pdl(consumer_kernel, grid, block, 0, r.a, r.buffer, row, elements);
        break;
      case PdlChain::kThroughMemset:
        MG_CUDA_CHECK(cudaMemsetAsync(r.scratch, 0, sizeof(int32_t), r.a));
        cuda::launch_pdl(consumer_kernel, grid, block, 0, r.a, r.buffer, row, elements);
        break;
      case PdlChain::kThroughMiddleKernel:
        cuda::launch_pdl(middle_kernel, dim3(1), dim3(32), 0, r.a);
        cuda::launch_pdl(consumer_kernel, grid, block, 0, r.a, r.buffer, row, elements);
        break;
      case PdlChain::kAcrossStreams:
        MG_CUDA_CHECK(cudaEventRecord(r.fork, r.a));
        MG_CUDA_CHECK(cudaStreamWaitEvent(r.b, r.fork, 0));
        cuda::launch_pdl(consumer_kernel, grid, block, 0, r.b, r.buffer, row, elements);
        MG_CUDA_CHECK(cudaEventRecord(r.join, r.b));
        MG_CUDA_CHECK(cudaStreamWaitEvent(r.a, r.join, 0));
        break;
      case PdlChain::kConsumerReadsEarly:
        cuda::launch_pdl(early_consumer_kernel, grid, block, 0, r.a, r.buffer, row, elements);
        break;
    }
  }
}

void count_wrong(const Resources& r, int rounds, int elements, PdlChainResult& result) {
  std::vector<int32_t> host(static_cast<size_t>(rounds) * elements);
  MG_CUDA_CHECK(
      cudaMemcpy(host.data(), r.out, host.size() * sizeof(int32_t), cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < host.size(); ++i) {
    result.wrong += host[i] != static_cast<int32_t>(i / static_cast<size_t>(elements)) ? 1 : 0;
  }
  result.checked += static_cast<int64_t>(host.size());
}

}  // namespace

PdlChainResult run_pdl_chain(PdlChain chain, int rounds, int elements, int spin_us, bool cuda_graph,
                             int graph_launches) {
  Resources r;
  MG_CUDA_CHECK(cudaStreamCreateWithFlags(&r.a, cudaStreamNonBlocking));
  MG_CUDA_CHECK(cudaStreamCreateWithFlags(&r.b, cudaStreamNonBlocking));
  MG_CUDA_CHECK(cudaEventCreateWithFlags(&r.fork, cudaEventDisableTiming));
  MG_CUDA_CHECK(cudaEventCreateWithFlags(&r.join, cudaEventDisableTiming));
  const size_t out_bytes = static_cast<size_t>(rounds) * elements * sizeof(int32_t);
  MG_CUDA_CHECK(cudaMalloc(&r.buffer, elements * sizeof(int32_t)));
  MG_CUDA_CHECK(cudaMalloc(&r.out, out_bytes));
  MG_CUDA_CHECK(cudaMalloc(&r.scratch, sizeof(int32_t)));
  // -1 everywhere: never a round number.
  MG_CUDA_CHECK(cudaMemset(r.buffer, 0xff, elements * sizeof(int32_t)));
  PdlChainResult result;
  if (!cuda_graph) {
    MG_CUDA_CHECK(cudaMemset(r.out, 0xff, out_bytes));
    MG_CUDA_CHECK(cudaDeviceSynchronize());
    queue_rounds(chain, r, rounds, elements, spin_us);
    MG_CUDA_CHECK(cudaStreamSynchronize(r.a));
    count_wrong(r, rounds, elements, result);
    return result;
  }
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  MG_CUDA_CHECK(cudaDeviceSynchronize());
  MG_CUDA_CHECK(cudaStreamBeginCapture(r.a, cudaStreamCaptureModeThreadLocal));
  queue_rounds(chain, r, rounds, elements, spin_us);
  MG_CUDA_CHECK(cudaStreamEndCapture(r.a, &graph));
  MG_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (int launch = 0; launch < graph_launches; ++launch) {
    // The buffer holds the last round's value from the launch before: a stale read is wrong.
    MG_CUDA_CHECK(cudaMemsetAsync(r.out, 0xff, out_bytes, r.a));
    MG_CUDA_CHECK(cudaGraphLaunch(exec, r.a));
    MG_CUDA_CHECK(cudaStreamSynchronize(r.a));
    count_wrong(r, rounds, elements, result);
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  return result;
}

}  // namespace mg::testing
