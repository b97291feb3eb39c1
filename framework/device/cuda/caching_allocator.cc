// Stream-ordered caching allocator (see cuda_device.h for the contract).
//
// Blocks belong to the stream they were first allocated for. Released blocks go back to that
// stream's free list; since work on one stream runs in order, a later allocation on the same
// stream can reuse the block at once, without any host synchronisation. A stream's cached blocks
// are freed when the stream is destroyed (after it finished): a stream created later may get the
// same handle, and must not inherit blocks that another stream's queued work could still touch.
// Blocks are never split; sizes are rounded to 512 B below 1 MiB and to 2 MiB above, and a cached
// block is reused for a request only if it is at most twice as large, which bounds the waste.
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "framework/device/cuda/cuda_check.h"
#include "framework/device/cuda/cuda_device.h"

namespace mg::cuda {

namespace {

constexpr size_t kSmallLimit = size_t{1} << 20;
constexpr size_t kSmallRound = 512;
constexpr size_t kLargeRound = size_t{2} << 20;

size_t round_size(size_t bytes) {
  if (bytes == 0) bytes = 1;
  const size_t r = bytes < kSmallLimit ? kSmallRound : kLargeRound;
  return (bytes + r - 1) / r * r;
}

class CachingAllocator final : public Allocator {
 public:
  explicit CachingAllocator(int device) : device_(device) {}

  Device device() const override { return Device::cuda(device_); }

  std::shared_ptr<Buffer> allocate(size_t bytes, Stream* stream) override {
    const size_t size = round_size(bytes);
    cudaStream_t s = native(stream);
    void* ptr = nullptr;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto& free_list = free_[s];
      auto it = free_list.lower_bound(size);
      if (it != free_list.end() && it->first <= 2 * size) {
        ptr = it->second;
        free_list.erase(it);
      }
      if (ptr == nullptr) ptr = cuda_malloc_locked(size);
      sizes_[ptr] = size;
      stats_.bytes_in_use += size;
    }
    std::shared_ptr<void> owner(ptr, [this, s](void* p) { release(p, s); });
    return std::make_shared<Buffer>(ptr, bytes, Device::cuda(device_), std::move(owner));
  }

  // `stream` has finished all its work and is about to be destroyed. Called from a destructor:
  // errors (a runtime already shut down at exit) are ignored.
  void drop_stream(cudaStream_t stream) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = free_.find(stream);
    if (it == free_.end()) return;
    for (auto& [size, ptr] : it->second) {
      cudaFree(ptr);
      stats_.bytes_reserved -= size;
    }
    free_.erase(it);
  }

  AllocatorStats stats() {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
  }

 private:
  void* cuda_malloc_locked(size_t size) {
    int previous = 0;
    MG_CUDA_CHECK(cudaGetDevice(&previous));
    MG_CUDA_CHECK(cudaSetDevice(device_));
    void* ptr = nullptr;
    cudaError_t err = cudaMalloc(&ptr, size);
    if (err == cudaErrorMemoryAllocation) {
      // Give every cached block back and try once more.
      cudaGetLastError();
      MG_CUDA_CHECK(cudaDeviceSynchronize());
      for (auto& [stream, list] : free_) {
        for (auto& [sz, p] : list) {
          MG_CUDA_CHECK(cudaFree(p));
          stats_.bytes_reserved -= sz;
        }
        list.clear();
      }
      err = cudaMalloc(&ptr, size);
    }
    cudaSetDevice(previous);
    if (err != cudaSuccess) {
      cudaGetLastError();
      throw Error(fmt::format("out of GPU memory on cuda:{}: cannot allocate {} bytes ({} in use)",
                              device_, size, stats_.bytes_in_use));
    }
    stats_.bytes_reserved += size;
    ++stats_.num_cuda_mallocs;
    return ptr;
  }

  void release(void* ptr, cudaStream_t stream) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = sizes_.find(ptr);
    if (it == sizes_.end()) return;
    const size_t size = it->second;
    sizes_.erase(it);
    stats_.bytes_in_use -= size;
    free_[stream].emplace(size, ptr);
  }

  int device_;
  std::mutex mutex_;
  std::unordered_map<cudaStream_t, std::multimap<size_t, void*>> free_;
  std::unordered_map<void*, size_t> sizes_;
  AllocatorStats stats_;
};

CachingAllocator& allocator_of(int device) {
  static std::mutex mutex;
  // Never destroyed: buffers may be released during static destruction.
  static auto* allocators = new std::unordered_map<int, CachingAllocator*>();
  std::lock_guard<std::mutex> lock(mutex);
  auto& slot = (*allocators)[device];
  if (slot == nullptr) slot = new CachingAllocator(device);
  return *slot;
}

}  // namespace

Allocator& caching_allocator(int device) {
  return allocator_of(device);
}
AllocatorStats caching_allocator_stats(int device) {
  return allocator_of(device).stats();
}
void drop_stream_blocks(int device, cudaStream_t stream) {
  allocator_of(device).drop_stream(stream);
}

}  // namespace mg::cuda
