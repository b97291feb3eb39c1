// What one dependent kernel boundary costs inside a CUDA graph, four ways (docs/performance.md,
// issue 15, session 34's probes). A chain of kKernels launches, each grid reading a value the
// previous grid wrote and writing its own; timed over graph replays, µs per kernel:
//   plain         ordinary launches (the next grid starts after the previous one completed)
//   pdl wait      programmatic dependent launch: griddepcontrol.wait, then launch_dependents
//   pdl launch    launch_dependents first, then wait (pdl.cuh's pdl_wait_then_launch(true))
//   flag          launch_dependents first; thread 0 of each block spins on the previous grid's
//                 arrival counter (ld.acquire) instead of griddepcontrol.wait; each block counts
//                 its own arrival with red.release after a barrier. The question it answers: is
//                 the wait for a whole grid's completion what a boundary costs, so that a flag
//                 handoff between dependent kernels would be cheaper? (On the H200: no.)
// Grid sizes 1 to 512 blocks of 256 threads, with and without a few weight loads before the
// synchronisation. Every mode's last output is checked (a wrong value is printed).
// Built with the CUDA tree as build/probes/kernel_boundary_probe (tools/probes/README.md);
// run it on the GPU machine. Alone, from the repository root:
//   nvcc -O3 -std=c++17 -arch=sm_90a -I. tools/probes/kernel_boundary_probe.cu -o /tmp/probe
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "tools/probes/probe_check.h"

namespace {

constexpr int kKernels = 400;
constexpr int kReplays = 20;
constexpr int kThreads = 256;
constexpr int kMaxGrid = 1024;
constexpr int kWeightFloats = 1 << 22;

enum Mode { kPlain, kPdlWait, kPdlLaunch, kFlag };

__device__ __forceinline__ void grid_wait() {
  asm volatile("griddepcontrol.wait;" ::: "memory");
}
__device__ __forceinline__ void launch_dependents() {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}
__device__ __forceinline__ unsigned load_acquire(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void add_release(unsigned* p) {
  asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(p) : "memory");
}

template <Mode kMode>
__global__ void __launch_bounds__(kThreads)
    step_kernel(const int* in, int in_grid, int* out, const unsigned* prev_arrivals,
                unsigned* arrivals, int weight_loads, const float* weights, float* sink,
                int broadcast_bytes) {
  // Loads of data no kernel writes (weights), issued before the synchronisation as ours are.
  float acc = 0.0f;
  for (int i = 0; i < weight_loads; ++i) {
    acc += __ldg(weights + ((blockIdx.x * kThreads + threadIdx.x) * 4 + i * 33331) % kWeightFloats);
  }
  if (kMode == kPdlWait) {
    grid_wait();
    launch_dependents();
  } else if (kMode == kPdlLaunch) {
    launch_dependents();
    grid_wait();
  } else if (kMode == kFlag) {
    launch_dependents();
    if (prev_arrivals != nullptr) {
      if (threadIdx.x == 0) {
        while (load_acquire(prev_arrivals) < static_cast<unsigned>(in_grid)) {
        }
      }
      __syncthreads();
    }
  }
  // Every block reads the same broadcast_bytes of what the previous grid wrote (as every block of
  // a GEMV reads its x row), 16 bytes a thread.
  for (int i = threadIdx.x * 4; i < broadcast_bytes / 4; i += kThreads * 4) {
    const int4 v = __ldg(reinterpret_cast<const int4*>(in) + i / 4);
    acc += static_cast<float>(v.x + v.y + v.z + v.w);
  }
  __shared__ int value;
  if (threadIdx.x == 0) value = in[blockIdx.x % in_grid];
  __syncthreads();
  if (threadIdx.x == 0) out[blockIdx.x] = value + 1;
  if (acc == 12345.0f) sink[0] = acc;  // keeps the weight loads
  if (kMode == kFlag) {
    __syncthreads();
    if (threadIdx.x == 0) add_release(arrivals);
  }
}

template <Mode kMode>
float us_per_kernel(int grid, int weight_loads, int broadcast_bytes, const float* weights,
                    float* sink) {
  int* values = nullptr;
  unsigned* arrivals = nullptr;
  CHECK(cudaMalloc(&values, sizeof(int) * (kKernels + 1) * kMaxGrid));
  CHECK(cudaMalloc(&arrivals, sizeof(unsigned) * kKernels));
  CHECK(cudaMemset(values, 0, sizeof(int) * (kKernels + 1) * kMaxGrid));
  cudaStream_t stream = nullptr;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  // The arrival counters start at zero in every replay (a memset node before the chain).
  CHECK(cudaMemsetAsync(arrivals, 0, sizeof(unsigned) * kKernels, stream));
  for (int i = 0; i < kKernels; ++i) {
    cudaLaunchAttribute attr;
    attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr.val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3(grid);
    config.blockDim = dim3(kThreads);
    config.stream = stream;
    config.attrs = &attr;
    config.numAttrs = kMode == kPlain || i == 0 ? 0 : 1;
    const unsigned* prev = i == 0 ? nullptr : arrivals + i - 1;
    CHECK(cudaLaunchKernelEx(&config, step_kernel<kMode>,
                             static_cast<const int*>(values + i * kMaxGrid), grid,
                             values + (i + 1) * kMaxGrid, prev, arrivals + i, weight_loads, weights,
                             sink, broadcast_bytes));
  }
  CHECK(cudaStreamEndCapture(stream, &graph));
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (int i = 0; i < 3; ++i) CHECK(cudaGraphLaunch(exec, stream));
  cudaEvent_t begin, end;
  CHECK(cudaEventCreate(&begin));
  CHECK(cudaEventCreate(&end));
  CHECK(cudaEventRecord(begin, stream));
  for (int r = 0; r < kReplays; ++r) CHECK(cudaGraphLaunch(exec, stream));
  CHECK(cudaEventRecord(end, stream));
  CHECK(cudaStreamSynchronize(stream));
  float ms = 0.0f;
  CHECK(cudaEventElapsedTime(&ms, begin, end));
  // Grid i writes 1 + what grid i - 1 wrote, so the last grid's values are kKernels.
  std::vector<int> last(static_cast<size_t>(grid));
  CHECK(cudaMemcpy(last.data(), values + kKernels * kMaxGrid, sizeof(int) * grid,
                   cudaMemcpyDeviceToHost));
  int wrong = 0;
  for (int v : last) wrong += v != kKernels;
  if (wrong > 0) std::printf("  mode %d grid %d: %d wrong values\n", kMode, grid, wrong);
  CHECK(cudaEventDestroy(begin));
  CHECK(cudaEventDestroy(end));
  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(graph));
  CHECK(cudaStreamDestroy(stream));
  CHECK(cudaFree(values));
  CHECK(cudaFree(arrivals));
  return 1000.0f * ms / kReplays / kKernels;
}

}  // namespace

int main() {
  float* weights = nullptr;
  float* sink = nullptr;
  CHECK(cudaMalloc(&weights, sizeof(float) * kWeightFloats));
  CHECK(cudaMemset(weights, 0, sizeof(float) * kWeightFloats));
  CHECK(cudaMalloc(&sink, sizeof(float)));
  std::printf("us per kernel in a graph of %d dependent kernels (%d threads a block)\n", kKernels,
              kThreads);
  for (const int loads : {0, 8}) {
    for (const int grid : {1, 8, 132, 264, 512}) {
      std::printf(
          "weight loads %d, grid %4d: plain %.3f  pdl wait %.3f  pdl launch %.3f  flag %.3f\n",
          loads, grid, us_per_kernel<kPlain>(grid, loads, 0, weights, sink),
          us_per_kernel<kPdlWait>(grid, loads, 0, weights, sink),
          us_per_kernel<kPdlLaunch>(grid, loads, 0, weights, sink),
          us_per_kernel<kFlag>(grid, loads, 0, weights, sink));
    }
  }
  // The same 4 or 8 KB of the previous grid's output read by every block after the wait (pdl
  // wait mode), against none.
  for (const int grid : {132, 264, 512, 1024}) {
    std::printf(
        "pdl wait, grid %4d: every block reads 0 / 4096 / 8192 bytes of the previous output: "
        "%.3f / %.3f / %.3f\n",
        grid, us_per_kernel<kPdlWait>(grid, 0, 0, weights, sink),
        us_per_kernel<kPdlWait>(grid, 0, 4096, weights, sink),
        us_per_kernel<kPdlWait>(grid, 0, 8192, weights, sink));
  }
  CHECK(cudaFree(weights));
  CHECK(cudaFree(sink));
  return 0;
}
