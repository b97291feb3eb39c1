// CUDA streams, events, the caching allocator and per-device library handles.
#pragma once

#include <cstddef>
#include <memory>

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "framework/device/allocator.h"

namespace mg::cuda {

class CudaStream final : public Stream {
 public:
  explicit CudaStream(int device);
  ~CudaStream() override;
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;

  Device device() const override { return Device::cuda(device_); }
  void synchronize() override;
  void* native_handle() const override { return stream_; }
  cudaStream_t get() const { return stream_; }

 private:
  int device_;
  cudaStream_t stream_ = nullptr;
};

class CudaEvent final : public Event {
 public:
  CudaEvent(int device, bool timing);
  ~CudaEvent() override;
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;

  void record(Stream& stream) override;
  void wait_on(Stream& stream) override;
  void synchronize() override;
  double elapsed_us_since(const Event& start) const override;
  cudaEvent_t get() const { return event_; }

 private:
  int device_;
  cudaEvent_t event_ = nullptr;
};

// cudaStream_t of a Stream (nullptr = legacy default stream for CPU streams or null).
inline cudaStream_t native(Stream* stream) {
  return stream ? static_cast<cudaStream_t>(stream->native_handle()) : nullptr;
}

// The caching allocator of one device: blocks are rounded up to size classes and kept on free
// lists when released, so steady-state forward passes never call cudaMalloc. A block belongs to
// the stream it was allocated for and is reused only by that stream, at once, without
// synchronisation: a buffer used on other streams must be released only after that stream waited
// for them (an event), as the MoE runner's side stream is joined before its buffers die.
Allocator& caching_allocator(int device);
// Frees the cached (released) blocks of `stream`, which has finished its work; CudaStream's
// destructor calls it.
void drop_stream_blocks(int device, cudaStream_t stream);

struct AllocatorStats {
  size_t bytes_reserved = 0;    // obtained from cudaMalloc
  size_t bytes_in_use = 0;      // handed out and not yet released
  size_t num_cuda_mallocs = 0;  // cudaMalloc calls so far
};
AllocatorStats caching_allocator_stats(int device);

// Library handles, created once per device and thread-safe to share within one host thread.
cublasHandle_t cublas_handle(int device);
cublasLtHandle_t cublaslt_handle(int device);

}  // namespace mg::cuda
