#include "framework/device/cuda/cuda_check.h"
#include "framework/device/cuda/cuda_device.h"

namespace mg::cuda {

namespace {
// Sets the current device for the lifetime of the guard.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    MG_CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != device) MG_CUDA_CHECK(cudaSetDevice(device));
  }
  ~DeviceGuard() { cudaSetDevice(previous_); }

 private:
  int previous_ = 0;
};
}  // namespace

CudaStream::CudaStream(int device) : device_(device) {
  DeviceGuard guard(device);
  MG_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
}

CudaStream::~CudaStream() {
  if (!stream_) return;
  // Work still queued may use blocks the allocator keeps for this stream; a stream created later
  // can get the same handle, so the blocks go back to the driver once the work is done.
  try {
    DeviceGuard guard(device_);
    cudaStreamSynchronize(stream_);
    drop_stream_blocks(device_, stream_);
  } catch (...) {  // a destructor must not throw (at exit the CUDA runtime may already be gone)
  }
  cudaStreamDestroy(stream_);
}

void CudaStream::synchronize() {
  MG_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

CudaEvent::CudaEvent(int device, bool timing) : device_(device) {
  DeviceGuard guard(device);
  MG_CUDA_CHECK(
      cudaEventCreateWithFlags(&event_, timing ? cudaEventDefault : cudaEventDisableTiming));
}

CudaEvent::~CudaEvent() {
  if (event_) cudaEventDestroy(event_);
}

void CudaEvent::record(Stream& stream) {
  MG_CUDA_CHECK(cudaEventRecord(event_, native(&stream)));
}

void CudaEvent::wait_on(Stream& stream) {
  MG_CUDA_CHECK(cudaStreamWaitEvent(native(&stream), event_, 0));
}

void CudaEvent::synchronize() {
  MG_CUDA_CHECK(cudaEventSynchronize(event_));
}

double CudaEvent::elapsed_us_since(const Event& start) const {
  const auto* cuda_start = dynamic_cast<const CudaEvent*>(&start);
  MG_ASSERT(cuda_start != nullptr, "elapsed time between a CUDA event and a CPU event");
  float ms = 0.0f;
  MG_CUDA_CHECK(cudaEventElapsedTime(&ms, cuda_start->event_, event_));
  return 1e3 * static_cast<double>(ms);
}

}  // namespace mg::cuda
