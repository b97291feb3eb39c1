// Programmatic dependent launch (PDL, sm_90+) for our kernels: the device side (pdl_wait,
// pdl_launch_dependents, pdl_prefetch_l2) and the launcher (launch_pdl). nvcc only; the switch
// (MG_PDL, set_pdl_enabled) is in pdl.h.
//
// Why: a decode step is a chain of ~10 small dependent kernels per layer, and between two of
// them a plain launch leaves the GPU idle for the previous kernel's tail (its last blocks), the
// drain and the next kernel's launch and ramp. A kernel launched with programmatic stream
// serialization may start while the previous kernel in its stream still runs, once every block
// of that kernel has called pdl_launch_dependents (or exited); it then waits in pdl_wait until
// the previous kernel has completed and its writes are visible. Work placed before pdl_wait
// (block setup, weight loads) overlaps the previous kernel's tail. Inside stream
// capture the attribute becomes a programmatic edge of the CUDA graph. Copies, memsets, event
// waits and kernels launched without it (cuBLAS) are waited for as before.
//
// THE RULE for a kernel launched with launch_pdl (a past bug: a kernel read its predecessor's
// output before griddepcontrol.wait; compute-sanitizer's initcheck caught it):
//  1. Every thread calls pdl_wait() before its first read of anything another kernel or copy
//     wrote (activations, ids, positions, KV caches, counters, workspace) and before its first
//     global write (the previous kernel may still read the bytes it overwrites: a reused arena
//     range or workspace). Before pdl_wait a kernel may only read what never changes while
//     graphs run: weights, its parameters, constants. One exception: the step's inputs that the
//     host copies before the step's first kernel (positions, row slots, block tables; no op
//     yields I32 values, so no kernel writes them) may be read there too; the rope kernels'
//     cos/sin and the split-KV attention's key range do. The split-KV attention with the KV-cache
//     write inside (attention_cuda.cuh) also reads there the cache rows of earlier steps, which
//     no kernel of this step writes before it.
//  2. Every thread calls pdl_wait() before it exits, on every path: a thread that returns early
//     (a tail block, an unused split) calls it first. A kernel's completion then implies its
//     predecessor's, so a kernel further down the stream that reads an older output finds it
//     complete even when the kernels between did not read it.
//  3. pdl_launch_dependents() only after pdl_wait(). Then a kernel that starts early finds every
//     kernel before its own predecessor complete; decode_down_kernel (ops/moe/cuda) relies on
//     this, and says so where it does. The call is optional: without it the next kernel starts
//     as this one's blocks exit. The one exception: pdl_wait_then_launch(true) below, for the
//     kernels (the norms, the split-KV attention) whose possible successors all keep rule 1.
// The simplest conforming kernel calls pdl_wait(); pdl_launch_dependents(); first. Kernels that
// are not launched with the attribute may call both: they are no-ops then (and below sm_90).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <utility>

#include "framework/device/cuda/cuda_check.h"
#include "framework/device/cuda/pdl.h"

namespace mg::cuda {

// Waits until the previous kernel in the stream has completed and its writes are visible.
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Lets the next kernel of the stream (launched with launch_pdl) start once every block of this
// one has called it or exited. Only after pdl_wait() (rule 3).
__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// pdl_wait() then pdl_launch_dependents(); with `early_dependents` the other way round, the one
// exception to rule 3. A kernel may take it when every kernel that can follow it reads only weights
// before its own pdl_wait (rule 1; decode_down_kernel is the one that does not, and it follows
// only the decode up kernel). The next kernel (a GEMV) then becomes resident and starts its
// weight loads while this kernel still waits for the one before (the MoE's down kernel, or
// q/k norm + rope): its weight stream overlaps two kernels' latency instead of one. The host's
// switch is pdl_early_dependents() (pdl.h).
__device__ __forceinline__ void pdl_wait_then_launch(bool early_dependents) {
  if (early_dependents) pdl_launch_dependents();
  pdl_wait();
  if (!early_dependents) pdl_launch_dependents();
}

// Asks L2 for `bytes` of immutable data (weights) from the 16-byte aligned `ptr`, in pieces of
// 16 KB dealt to the threads `begin, begin + step, ...` of the caller; the tail below 16 bytes is
// left out. Nothing lands in registers and no thread waits: called before pdl_wait, it overlaps
// the weight stream's first bytes with the previous kernel's tail. sm_90; else nothing. Measure
// it end to end before using it: the stream competes with the kernel it runs beside, and where
// that kernel is a chain of L2 round trips (attention's merge, a norm) it loses more than the
// prefetch gains (the GEMV dropped it for that: linear_gemv_cuda.cuh); the WNA16 decode down
// kernel keeps it as an option, off by default.
__device__ __forceinline__ void pdl_prefetch_l2(const void* ptr, int64_t bytes, int begin,
                                                int step) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  constexpr int64_t kPiece = 16 * 1024;
  bytes = bytes / 16 * 16;
  const char* base = static_cast<const char*>(ptr);
  for (int64_t offset = static_cast<int64_t>(begin) * kPiece; offset < bytes;
       offset += static_cast<int64_t>(step) * kPiece) {
    const int64_t piece = bytes - offset < kPiece ? bytes - offset : kPiece;
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(base + offset),
                 "r"(static_cast<uint32_t>(piece))
                 : "memory");
  }
#endif
}

// Launches kernel<<<grid, block, smem, stream>>>(args...) with programmatic stream serialization
// when `want` and pdl_enabled() (MG_PDL), else as an ordinary launch. The kernel must follow the
// rule above either way.
template <typename... Params, typename... Args>
void launch_pdl_if(bool want, void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                   cudaStream_t stream, Args&&... args) {
  cudaLaunchAttribute attr;
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  config.attrs = &attr;
  config.numAttrs = want && pdl_enabled() ? 1 : 0;
  MG_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...));
  MG_CUDA_CHECK_LAUNCH();
}

template <typename... Params, typename... Args>
void launch_pdl(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                Args&&... args) {
  launch_pdl_if(true, kernel, grid, block, smem, stream, std::forward<Args>(args)...);
}

}  // namespace mg::cuda
