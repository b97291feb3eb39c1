#include "framework/runtime/profiler.h"

#include <algorithm>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "framework/core/error.h"
#include "framework/io/regular_file.h"

namespace mg {

double Profiler::now_us() const {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - origin_)
      .count();
}

void Profiler::record(std::string name, std::string category, double start_us, double duration_us) {
  events_.push_back({std::move(name), std::move(category), start_us, duration_us, rank_, tokens_});
}

std::string Profiler::summary() const {
  struct Total {
    double us = 0;
    int64_t calls = 0;
  };
  std::ostringstream os;
  for (const bool decode : {false, true}) {
    std::map<std::string, Total> by_op;
    Total nodes, forwards;
    int64_t tokens = 0;
    for (const Event& e : events_) {
      if ((e.tokens == 1) != decode) continue;
      if (e.category == "session") {
        forwards.us += e.duration_us;
        forwards.calls += 1;
        tokens += e.tokens;
        continue;
      }
      by_op[e.category].us += e.duration_us;
      by_op[e.category].calls += 1;
      nodes.us += e.duration_us;
    }
    if (by_op.empty() && forwards.calls == 0) continue;
    std::vector<std::pair<std::string, Total>> rows(by_op.begin(), by_op.end());
    std::sort(rows.begin(), rows.end(),
              [](const auto& a, const auto& b) { return a.second.us > b.second.us; });
    os << (decode ? fmt::format("decode: {} one-token forwards\n", forwards.calls)
                  : fmt::format("prefill: {} forwards, {} tokens\n", forwards.calls, tokens));
    os << fmt::format("{:<14} {:>10} {:>12} {:>10} {:>7}\n", "op", "calls", "total ms", "avg us",
                      "share");
    for (const auto& [op, t] : rows) {
      os << fmt::format("{:<14} {:>10} {:>12.3f} {:>10.1f} {:>6.1f}%\n", op, t.calls, t.us / 1e3,
                        t.us / static_cast<double>(t.calls),
                        nodes.us > 0 ? 100.0 * t.us / nodes.us : 0.0);
    }
    os << fmt::format("{:<14} {:>10} {:>12.3f}\n", "all nodes", "", nodes.us / 1e3);
    if (forwards.calls > 0) {
      os << fmt::format("{:<14} {:>10} {:>12.3f} {:>10.1f}   (outside the nodes: {:.3f} ms)\n",
                        "forward wall", forwards.calls, forwards.us / 1e3,
                        forwards.us / static_cast<double>(forwards.calls),
                        (forwards.us - nodes.us) / 1e3);
    }
  }
  return os.str();
}

void Profiler::write_trace(const std::filesystem::path& file) const {
  write_trace(file, events_);
}

void Profiler::write_trace(const std::filesystem::path& file, const std::vector<Event>& events) {
  nlohmann::json trace = nlohmann::json::array();
  for (const Event& e : events) {
    trace.push_back({{"name", e.name},
                     {"cat", e.category},
                     {"ph", "X"},
                     {"ts", e.start_us},
                     {"dur", e.duration_us},
                     {"pid", 0},
                     {"tid", e.rank},
                     {"args", {{"tokens", e.tokens}}}});
  }
  write_file_atomically(
      file, nlohmann::json{{"traceEvents", trace}, {"displayTimeUnit", "ms"}}.dump() + "\n");
}

}  // namespace mg
