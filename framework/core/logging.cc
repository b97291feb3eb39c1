#include "framework/core/logging.h"

#include <atomic>
#include <mutex>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "framework/core/error.h"

namespace mg::log {

namespace {
std::atomic<Level> g_level{Level::kWarn};

spdlog::level::level_enum to_spdlog(Level level) {
  switch (level) {
    case Level::kTrace:
      return spdlog::level::trace;
    case Level::kDebug:
      return spdlog::level::debug;
    case Level::kInfo:
      return spdlog::level::info;
    case Level::kWarn:
      return spdlog::level::warn;
    case Level::kError:
      return spdlog::level::err;
    case Level::kOff:
      return spdlog::level::off;
  }
  return spdlog::level::info;
}

// All loggers write to stderr so stdout stays clean for program output.
std::shared_ptr<spdlog::logger> get(std::string_view name) {
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  std::string key(name);
  if (auto logger = spdlog::get(key)) return logger;
  auto logger = spdlog::stderr_color_mt(key);
  logger->set_pattern("[%H:%M:%S.%e] [%n] [%^%l%$] %v");
  logger->set_level(spdlog::level::trace);
  return logger;
}
}  // namespace

void set_level(Level level) {
  g_level = level;
}

bool enabled(Level level) {
  return level >= g_level.load(std::memory_order_relaxed);
}

Level parse_level(std::string_view text) {
  if (text == "trace") return Level::kTrace;
  if (text == "debug") return Level::kDebug;
  if (text == "info") return Level::kInfo;
  if (text == "warn") return Level::kWarn;
  if (text == "error") return Level::kError;
  if (text == "off") return Level::kOff;
  MG_FAIL("unknown log level '{}' (expected trace, debug, info, warn, error or off)", text);
}

void write(Level level, std::string_view logger, const std::string& message) {
  get(logger)->log(to_spdlog(level), "{}", message);
}

}  // namespace mg::log
