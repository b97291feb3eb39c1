// CPU implementations of streams, events and the allocator.
#include <cstdlib>
#include <cstring>

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
  void record(Stream&) override {}
  void wait_on(Stream&) override {}
  void synchronize() override {}
};

class CpuAllocator final : public Allocator {
 public:
  Device device() const override { return Device::cpu(); }
  std::shared_ptr<Buffer> allocate(size_t bytes, Stream*) override {
    const size_t padded = (bytes + 63) / 64 * 64 + 64;
    void* p = std::aligned_alloc(64, padded);
    MG_ASSERT(p != nullptr, "out of host memory allocating {} bytes", padded);
    std::memset(p, 0, padded);
    std::shared_ptr<void> owner(p, [](void* q) { std::free(q); });
    return std::make_shared<Buffer>(p, bytes, Device::cpu(), std::move(owner));
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
