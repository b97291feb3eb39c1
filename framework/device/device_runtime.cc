// Dispatches streams, events, allocation and copies to the CPU or CUDA implementation.
#include <cstring>

#include "framework/core/checked_math.h"
#include "framework/device/allocator.h"
#include "framework/device/cpu/cpu_device.h"
#ifdef MG_WITH_CUDA
#include "framework/device/cuda/cuda_check.h"
#include "framework/device/cuda/cuda_device.h"
#endif

namespace mg {

namespace {
[[noreturn]] void no_cuda(Device device) {
  MG_FAIL("device {} requested, but this moegraph was built without CUDA (MG_CUDA=OFF)",
          device.str());
}
}  // namespace

bool built_with_cuda() {
#ifdef MG_WITH_CUDA
  return true;
#else
  return false;
#endif
}

int cuda_device_count() {
#ifdef MG_WITH_CUDA
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
#else
  return 0;
#endif
}

void check_device_exists(Device device) {
  if (device.is_cpu()) return;
  if (!built_with_cuda()) no_cuda(device);
  const int count = cuda_device_count();
  MG_CHECK(device.index >= 0 && device.index < count,
           "device {} requested, but this machine has {} CUDA GPU{}", device.str(), count,
           count == 1 ? "" : "s");
}

DeviceScope::DeviceScope(Device device) {
#ifdef MG_WITH_CUDA
  if (!device.is_cuda()) return;
  int current = 0;
  MG_CUDA_CHECK(cudaGetDevice(&current));
  if (current == device.index) return;
  MG_CUDA_CHECK(cudaSetDevice(device.index));
  previous_ = current;
#else
  (void)device;
#endif
}

DeviceScope::~DeviceScope() {
#ifdef MG_WITH_CUDA
  if (previous_ >= 0) cudaSetDevice(previous_);
#endif
}

std::unique_ptr<Stream> make_stream(Device device) {
  if (device.is_cpu()) return make_cpu_stream();
#ifdef MG_WITH_CUDA
  return std::make_unique<cuda::CudaStream>(device.index);
#else
  no_cuda(device);
#endif
}

std::unique_ptr<Event> make_event(Device device, bool timing) {
  if (device.is_cpu()) return make_cpu_event();
#ifdef MG_WITH_CUDA
  return std::make_unique<cuda::CudaEvent>(device.index, timing);
#else
  no_cuda(device);
#endif
}

Allocator& allocator_for(Device device) {
  if (device.is_cpu()) return cpu_allocator();
#ifdef MG_WITH_CUDA
  return cuda::caching_allocator(device.index);
#else
  no_cuda(device);
#endif
}

Tensor empty_tensor(Device device, DType dtype, Shape shape, Stream* stream) {
  const size_t bytes = allocation_bytes(
      shape, dtype,
      fmt::format("{} tensor {}{}", device.str(), dtype_name(dtype), shape_str(shape)));
  return Tensor(allocator_for(device).allocate(bytes, stream), dtype, std::move(shape));
}

void copy_tensor(const Tensor& dst, const Tensor& src, Stream* stream) {
  MG_ASSERT(dst.dtype() == src.dtype() && dst.numel() == src.numel(), "copy {} <- {}", dst.str(),
            src.str());
  const size_t n = src.nbytes();
  if (n == 0) return;
  if (dst.device().is_cpu() && src.device().is_cpu()) {
    std::memcpy(dst.raw(), src.raw(), n);
    return;
  }
#ifdef MG_WITH_CUDA
  cudaStream_t s = cuda::native(stream);
  MG_CUDA_CHECK(cudaMemcpyAsync(dst.raw(), src.raw(), n, cudaMemcpyDefault, s));
  if (stream == nullptr || dst.device().is_cpu()) MG_CUDA_CHECK(cudaStreamSynchronize(s));
#else
  (void)stream;
  no_cuda(dst.device().is_cpu() ? src.device() : dst.device());
#endif
}

Tensor to_host_tensor(const Tensor& t) {
  if (!t.defined() || t.device().is_cpu()) return t;
  Tensor out = Tensor::empty_cpu(t.dtype(), t.shape());
  copy_tensor(out, t);
  return out;
}

Tensor to_device_tensor(const Tensor& t, Device device) {
  if (!t.defined() || t.device() == device) return t;
  Tensor out = empty_tensor(device, t.dtype(), t.shape());
  copy_tensor(out, t);
  return out;
}

void synchronize_device(Device device) {
  if (!device.is_cuda()) return;
#ifdef MG_WITH_CUDA
  DeviceScope scope(device);
  MG_CUDA_CHECK(cudaDeviceSynchronize());
#else
  no_cuda(device);
#endif
}

}  // namespace mg
