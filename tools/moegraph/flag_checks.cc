#include "tools/moegraph/flag_checks.h"

#include <fmt/format.h>

namespace mg::cli {

CLI::Validator int_range(int64_t min, int64_t max) {
  const std::string range = fmt::format("[{}, {}]", min, max);
  return CLI::Validator(
      [min, max, range](std::string& text) -> std::string {
        int64_t value = 0;
        if (!CLI::detail::lexical_cast(text, value)) {
          return fmt::format("'{}' is not an integer in {}", text, range);
        }
        if (value < min || value > max) return fmt::format("{} is out of range {}", text, range);
        return "";
      },
      "in " + range);
}

CLI::Validator non_negative_u64() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        uint64_t value = 0;
        if (text.find('-') != std::string::npos || !CLI::detail::lexical_cast(text, value)) {
          return fmt::format("'{}' is not an integer in [0, {}]", text, UINT64_MAX);
        }
        return "";
      },
      fmt::format("in [0, {}]", UINT64_MAX));
}

}  // namespace mg::cli
