// CPU implementations of streams, events and the allocator.
#include <chrono>
#include <cstring>

#include "framework/core/host_memory.h"
#include "framework/device/allocator.h"
#include "framework/device/cpu/cpu_device.h"

namespace mg {

namespace {

class CpuStream final : public Stream {
 public:
  Device device() const override { return Device::cpu(); }
  void synchronize() override {}
};

class CpuEvent final : public Event {
 public:
  // CPU work is done when the host moves on, so the host clock at record time is the point.
  void record(Stream&) override { recorded_ = std::chrono::steady_clock::now(); }
  void wait_on(Stream&) override {}
  void synchronize() override {}
  double elapsed_us_since(const Event& start) const override {
    const auto* cpu_start = dynamic_cast<const CpuEvent*>(&start);
    MG_ASSERT(cpu_start != nullptr, "elapsed time between a CPU event and a CUDA event");
    return std::chrono::duration<double, std::micro>(recorded_ - cpu_start->recorded_).count();
  }

 private:
  std::chrono::steady_clock::time_point recorded_{};
};

class CpuAllocator final : public Allocator {
 public:
  Device device() const override { return Device::cpu(); }
  std::shared_ptr<Buffer> allocate(size_t bytes, Stream*) override {
    return allocate_host_buffer(bytes, "host buffer");
  }
};

}  // namespace

std::unique_ptr<Stream> make_cpu_stream() {
  return std::make_unique<CpuStream>();
}
std::unique_ptr<Event> make_cpu_event() {
  return std::make_unique<CpuEvent>();
}
Allocator& cpu_allocator() {
  static CpuAllocator allocator;
  return allocator;
}

}  // namespace mg
