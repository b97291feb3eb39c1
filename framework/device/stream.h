// Streams and events: the ordering abstraction shared by CPU and CUDA code.
//
// On the CPU work runs synchronously, so a stream is a no-op marker and events are trivially
// complete; on CUDA they wrap cudaStream_t / cudaEvent_t. Code that forks work onto a side
// stream (the MoE runner's shared experts) is written once against this interface.
#pragma once

#include <memory>

#include "framework/device/device.h"

namespace mg {

class Stream {
 public:
  virtual ~Stream() = default;
  virtual Device device() const = 0;
  // Blocks the host until all work queued on this stream is done.
  virtual void synchronize() = 0;
  // cudaStream_t for CUDA streams, nullptr on the CPU.
  virtual void* native_handle() const { return nullptr; }
};

class Event {
 public:
  virtual ~Event() = default;
  // Marks the current end of `stream`'s queue.
  virtual void record(Stream& stream) = 0;
  // Makes `stream` wait (on the device, not the host) until the recorded point is reached.
  virtual void wait_on(Stream& stream) = 0;
  // Blocks the host until the recorded point is reached.
  virtual void synchronize() = 0;
  // Microseconds from the point `start` recorded to the point this event recorded; both must be
  // recorded, this one reached, and both made with `timing` (CPU events always time: they stamp
  // the host clock when recorded, since CPU work has finished by then).
  virtual double elapsed_us_since(const Event& start) const = 0;
};

std::unique_ptr<Stream> make_stream(Device device);
// `timing`: the event can be used with elapsed_us_since (CUDA events without it are cheaper).
std::unique_ptr<Event> make_event(Device device, bool timing = false);

}  // namespace mg
