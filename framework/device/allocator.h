// Device memory allocation and copies.
#pragma once

#include <cstddef>
#include <memory>

#include "framework/core/tensor.h"
#include "framework/device/stream.h"

namespace mg {

class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual Device device() const = 0;
  // A buffer of at least `bytes`, usable by work queued on `stream` (CUDA allocators are
  // stream-ordered; the CPU ignores the stream). Memory is returned when the Buffer dies.
  virtual std::shared_ptr<Buffer> allocate(size_t bytes, Stream* stream = nullptr) = 0;
};

// The process-wide allocator of `device` (the caching allocator for CUDA devices).
Allocator& allocator_for(Device device);

// Allocates a tensor on `device` (contents undefined on CUDA, zeroed on the CPU).
Tensor empty_tensor(Device device, DType dtype, Shape shape, Stream* stream = nullptr);

// Copies src into dst (same dtype and element count), across devices as needed. Host <-> device
// copies through `stream`; pass nullptr to block until done.
void copy_tensor(const Tensor& dst, const Tensor& src, Stream* stream = nullptr);

// `t` in host memory: itself when it is there (or undefined), else a blocking copy.
Tensor to_host_tensor(const Tensor& t);

// `t` on `device`: itself when it is there (or undefined), else a blocking copy.
Tensor to_device_tensor(const Tensor& t, Device device);

// Blocks until all work queued on `device`, on every stream, is done (no-op for the CPU). Kernel
// builds queue weight copies on the legacy default stream, which the non-blocking streams that run
// kernels do not wait for; compile ends with this call so the first forward reads whole weights.
void synchronize_device(Device device);

// Number of CUDA devices visible; 0 in a CPU-only build or on a machine without a GPU.
int cuda_device_count();
// True when this binary was built with CUDA support.
bool built_with_cuda();

// Throws mg::Error naming `device` when this build or machine cannot run it (no CUDA support, or
// no GPU of that index).
void check_device_exists(Device device);

// Makes `device` the calling thread's current GPU while it lives (kernels, cuBLAS calls and graph
// captures go to the current GPU, so every thread that queues work for cuda:N holds one); the
// previous current GPU is restored. No-op for the CPU.
class DeviceScope {
 public:
  explicit DeviceScope(Device device);
  ~DeviceScope();
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int previous_ = -1;  // -1: nothing to restore
};

}  // namespace mg
