// Logging through named loggers ("graph", "compile", "oracle", "moe", "cuda", "runtime", "io").
//
// Headers stay light: the message is formatted with fmt here and handed to spdlog in logging.cc.
// Debug and trace calls compile to nothing unless MG_ENABLE_DEBUG_LOG is defined (debug builds).
#pragma once

#include <string>
#include <string_view>

#include <fmt/format.h>

namespace mg::log {

enum class Level { kTrace, kDebug, kInfo, kWarn, kError, kOff };

// Sets the level of every logger ("trace", "debug", "info", "warn", "error", "off").
void set_level(Level level);
Level parse_level(std::string_view text);  // throws mg::Error on unknown text
bool enabled(Level level);
void write(Level level, std::string_view logger, const std::string& message);

#ifdef MG_ENABLE_DEBUG_LOG
inline constexpr bool kDebugCompiled = true;
#else
inline constexpr bool kDebugCompiled = false;
#endif

}  // namespace mg::log

#define MG_LOG_AT(level, logger, ...)                              \
  do {                                                             \
    if (::mg::log::enabled(level)) {                               \
      ::mg::log::write(level, logger, ::fmt::format(__VA_ARGS__)); \
    }                                                              \
  } while (false)

#define MG_LOG_INFO(logger, ...) MG_LOG_AT(::mg::log::Level::kInfo, logger, __VA_ARGS__)
#define MG_LOG_WARN(logger, ...) MG_LOG_AT(::mg::log::Level::kWarn, logger, __VA_ARGS__)
#define MG_LOG_ERROR(logger, ...) MG_LOG_AT(::mg::log::Level::kError, logger, __VA_ARGS__)
#define MG_LOG_DEBUG(logger, ...)                               \
  do {                                                          \
    if constexpr (::mg::log::kDebugCompiled) {                  \
      MG_LOG_AT(::mg::log::Level::kDebug, logger, __VA_ARGS__); \
    }                                                           \
  } while (false)
