// Per-node timing: a summary table (`--profile`) and a Chrome-trace JSON file (`--trace FILE`)
// that chrome://tracing and Perfetto open.
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
  };

  void set_enabled(bool enabled) { enabled_ = enabled; }
  bool enabled() const { return enabled_; }
  void set_rank(int rank) { rank_ = rank; }

  // Microseconds since this profiler was created.
  double now_us() const;
  void record(std::string name, std::string category, double start_us, double duration_us);

  const std::vector<Event>& events() const { return events_; }
  // Total time per op and per node, largest first.
  std::string summary() const;
  // Writes every event as Chrome trace JSON ("X" events, microseconds).
  void write_trace(const std::filesystem::path& file) const;
  static void write_trace(const std::filesystem::path& file, const std::vector<Event>& events);

 private:
  bool enabled_ = false;
  int rank_ = 0;
  std::chrono::steady_clock::time_point origin_ = std::chrono::steady_clock::now();
  std::vector<Event> events_;
};

}  // namespace mg
