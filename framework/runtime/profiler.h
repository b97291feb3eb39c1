// Per-node timing: a summary table (`--profile`) and a Chrome-trace JSON file (`--trace FILE`)
// that chrome://tracing and Perfetto open. The Session times nodes with events on its stream, so
// on a GPU a node's time is the device's (from the point the stream reached the node to the point
// its last kernel finished), not the host's launch time.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace mg {

class Profiler {
 public:
  struct Event {
    std::string name;      // node name, or "forward"
    std::string category;  // op name
    double start_us;
    double duration_us;
    int rank;
    int64_t tokens;  // rows of the forward the event belongs to (1: a decode step)
  };

  void set_enabled(bool enabled) { enabled_ = enabled; }
  bool enabled() const { return enabled_; }
  void set_rank(int rank) { rank_ = rank; }
  // Rows of the forward being recorded; later events carry it.
  void set_tokens(int64_t tokens) { tokens_ = tokens; }

  // Microseconds since this profiler was created.
  double now_us() const;
  void record(std::string name, std::string category, double start_us, double duration_us);

  const std::vector<Event>& events() const { return events_; }
  // Total time per op, largest first, in one table for prefill (forwards of more than one token)
  // and one for decode (one-token forwards), each closed by the sum over its nodes and the wall
  // time of its forwards (the difference is time outside the nodes: input and logits copies,
  // the host's launch gaps).
  std::string summary() const;
  // Writes every event as Chrome trace JSON ("X" events, microseconds).
  void write_trace(const std::filesystem::path& file) const;
  static void write_trace(const std::filesystem::path& file, const std::vector<Event>& events);

 private:
  bool enabled_ = false;
  int rank_ = 0;
  int64_t tokens_ = 0;
  std::chrono::steady_clock::time_point origin_ = std::chrono::steady_clock::now();
  std::vector<Event> events_;
};

}  // namespace mg
